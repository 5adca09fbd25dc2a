"""One small protocol for chat generation, shared by every LLM back end (`dsonet.learn.llm` opens one).

    llm.generate(chats, n=5, temperature=0.7, max_tokens=128, seed=0) -> list[Completion]

``chats`` is a list of conversations (each a list of {"role", "content"} messages); the
back end answers every conversation with ``n`` samples. Taking many conversations at once
lets a local model batch them into one forward pass and a remote one keep a server busy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from dsonet.errors import DsoError

Message = dict[str, str]
Chat = Sequence[Message]


class LLMError(DsoError, RuntimeError):
    """A back end that cannot be reached or loaded, or bad generation arguments."""


@dataclass(frozen=True)
class Completion:
    """The ``n`` sampled answers to one conversation, with the tokens they cost."""

    texts: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@runtime_checkable
class ChatLLM(Protocol):
    @property
    def name(self) -> str: ...

    def generate(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
                 seed: int | None = None) -> list[Completion]: ...


@runtime_checkable
class Prefills(Protocol):
    """A `ChatLLM` that continues a chat ending in an assistant message from that text (where
    ``supports_prefill`` is True)."""

    supports_prefill: bool


def user(text: str, system: str | None = None) -> list[Message]:
    """A one-turn conversation."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


def check_args(chats: Sequence[Chat], n: int, temperature: float, max_tokens: int) -> None:
    if isinstance(chats, (str, dict)) or (chats and isinstance(chats[0], dict)):
        raise LLMError("chats: expected a list of conversations; wrap one conversation: generate([chat])")
    if n < 1:
        raise LLMError(f"n: {n} samples asked for; ask for at least 1")
    if temperature < 0:
        raise LLMError(f"temperature: {temperature} is negative; use 0 for greedy decoding")
    if max_tokens < 1:
        raise LLMError(f"max_tokens: {max_tokens}; allow at least 1 token")
