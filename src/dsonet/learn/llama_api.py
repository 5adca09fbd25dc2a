"""llama.cpp's C API as the embedded LLM uses it: a model, its vocabulary, a context, a batch, a sampler.

The library is llama-cpp-python's build of llama.cpp, compiled at install for the machine's own CPU
(`make install`: its kernels use every instruction set the cores have, AVX-512 where there is
one; a prebuilt wheel has to stop at AVX2). Its ctypes functions are thin: each class here owns one
C object, frees it when collected, and turns a C failure code into an `LLMError` that says what
failed. Nothing above this module touches ctypes.
"""

from __future__ import annotations

import ctypes
import weakref
from pathlib import Path
from typing import Sequence

import llama_cpp as C

from dsonet.learn.chat import LLMError


@C.llama_log_callback
def _silent(level: int, text: bytes, data: ctypes.c_void_p) -> None:
    """llama.cpp reports loading and every context to stderr; a failure reaches us as a return code."""


C.llama_log_set(_silent, ctypes.c_void_p(0))
C.llama_backend_init()


class Vocab:
    """A model's tokenizer: text to token ids and back, and which ids end a generation."""

    def __init__(self, ptr, owner: object):
        self._ptr, self._owner = ptr, owner  # the model owns the vocabulary: keep it alive

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode()
        room = len(data) + 8
        while True:
            out = (C.llama_token * room)()
            n = C.llama_tokenize(self._ptr, data, len(data), out, room, add_special, parse_special)
            if n >= 0:
                return list(out[:n])
            room = -n  # a negative count is the room it needs

    def detokenize(self, tokens: Sequence[int], remove_special: bool = True, unparse_special: bool = False) -> str:
        if not tokens:
            return ""
        ids = (C.llama_token * len(tokens))(*tokens)
        room = 8 * len(tokens) + 16
        while True:
            buf = ctypes.create_string_buffer(room)
            n = C.llama_detokenize(self._ptr, ids, len(tokens), buf, room, remove_special, unparse_special)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", errors="replace")
            room = -n

    def is_eog(self, token: int) -> bool:
        return bool(C.llama_vocab_is_eog(self._ptr, token))


class Model:
    """A GGUF model's weights, loaded on the CPU."""

    def __init__(self, path: Path):
        params = C.llama_model_default_params()
        params.n_gpu_layers = 0
        # no repacked weights: their kernels round a row differently in a block of rows than alone, so an
        # answer would depend on how much of its prompt the prefix cache held (measured: "When adding
        # numbers..." continued two ways); without them the 0.5B answered the demo's prompts as fast
        # (16.6 s against 16.3 s for 32) and 31 of 32 alike with the prebuilt AVX2 wheel
        params.use_extra_bufts = False
        self._ptr = C.llama_model_load_from_file(str(path).encode(), params)
        if not self._ptr:
            raise LLMError(f"model: llama.cpp cannot load {path}; is it a GGUF file of a supported model?")
        weakref.finalize(self, C.llama_model_free, self._ptr)
        self.vocab = Vocab(C.llama_model_get_vocab(self._ptr), self)

    def chat_template(self) -> str | None:
        raw = C.llama_model_chat_template(self._ptr, None)
        return raw.decode() if raw else None

    def apply_template(self, template: str, messages: Sequence[dict], add_assistant: bool) -> str:
        """The messages ({"role", "content"}) rendered by the model's template (llama.cpp's own renderer)."""
        encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
        chat = (C.llama_chat_message * len(encoded))(*[C.llama_chat_message(r, c) for r, c in encoded])
        room = 2 * sum(len(r) + len(c) for r, c in encoded) + 256
        while True:
            buf = ctypes.create_string_buffer(room)
            n = C.llama_chat_apply_template(template.encode(), chat, len(encoded), add_assistant, buf, room)
            if n < 0:
                raise LLMError("model: llama.cpp does not know this model's chat template")
            if n <= room:
                return buf.raw[:n].decode()
            room = n


class Batch:
    """Tokens to decode in one call, each with its position, its sequence and whether its logits are kept."""

    def __init__(self, capacity: int, n_seq_max: int):
        self._raw = C.llama_batch_init(capacity, 0, n_seq_max)
        self.capacity = capacity
        weakref.finalize(self, C.llama_batch_free, self._raw)

    def clear(self) -> None:
        self._raw.n_tokens = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> None:
        b, i = self._raw, self._raw.n_tokens
        if i >= self.capacity:
            raise LLMError(f"llm: a batch holds at most {self.capacity} tokens")
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
        b.seq_id[i][0] = seq
        b.n_tokens = i + 1


class Context:
    """A model's working state: a KV cache of ``n_seq_max`` streams of ``n_ctx_seq`` cells each."""

    def __init__(self, model: Model, n_ctx_seq: int, n_batch: int, n_seq_max: int, threads: int):
        params = C.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx_seq * n_seq_max, n_batch, n_batch
        params.n_seq_max, params.kv_unified = n_seq_max, False  # a stream per sequence, as if each ran alone
        params.n_threads = params.n_threads_batch = threads
        self._ptr = C.llama_init_from_model(model._ptr, params)
        if not self._ptr:
            raise LLMError(f"llm: llama.cpp cannot create a context of {n_seq_max} x {n_ctx_seq} tokens "
                           "(out of memory?); lower slots or n_ctx")
        self.model = model  # a context must not outlive its model
        weakref.finalize(self, C.llama_free, self._ptr)
        self._memory = C.llama_get_memory(self._ptr)

    def set_threads(self, threads: int) -> None:
        C.llama_set_n_threads(self._ptr, threads, threads)

    def decode(self, batch: Batch) -> None:
        status = C.llama_decode(self._ptr, batch._raw)
        if status != 0:
            raise LLMError(f"llm: llama_decode failed with status {status} "
                           "(1: no room in the KV cache; negative: an error)")

    def forget(self, seq: int, start: int = -1) -> None:
        """Drop a sequence's cells from position ``start`` on (every cell where ``start`` is -1)."""
        C.llama_memory_seq_rm(self._memory, seq, start, -1)

    def copy(self, src: int, dst: int) -> None:
        """Give ``dst`` every cell of ``src`` (a memory copy: no compute)."""
        C.llama_memory_seq_cp(self._memory, src, dst, -1, -1)


class Sampler:
    """A sampler chain: an optional grammar, then greedy or temperature sampling with its own seed."""

    def __init__(self, vocab: Vocab, temperature: float, seed: int, grammar: str | None = None):
        self._ptr = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
        self._vocab = vocab  # a grammar rule reads the vocabulary as long as the chain lives
        weakref.finalize(self, C.llama_sampler_free, self._ptr)
        if grammar:
            rule = C.llama_sampler_init_grammar(vocab._ptr, grammar.encode(), b"root")
            if not rule:
                raise LLMError("llm: llama.cpp cannot parse the grammar; it must be GBNF with a rule named root")
            C.llama_sampler_chain_add(self._ptr, rule)
        if temperature == 0:
            C.llama_sampler_chain_add(self._ptr, C.llama_sampler_init_greedy())
        else:  # plain temperature sampling over the full distribution (top_p = 1), as the paper's rollouts
            C.llama_sampler_chain_add(self._ptr, C.llama_sampler_init_temp(temperature))
            C.llama_sampler_chain_add(self._ptr, C.llama_sampler_init_dist(seed & 0xFFFFFFFF))

    def sample(self, ctx: Context, row: int) -> int:
        """A token from the logits of row ``row`` of the last decode (-1: its last row); the chain keeps it."""
        return int(C.llama_sampler_sample(self._ptr, ctx._ptr, row))
