"""A `ChatLLM` that remembers every answer on disk, so long runs resume where they stopped.

The key is the SHA-256 of everything that decides an answer: the model's name, the whole chat
(system message with its notes, question, answer format), n, temperature, max_tokens, seed and
the prompts version. An interrupted bench or learning run that is started again pays only for
the answers it had not yet got; a changed prompt or lesson is a new key, never a stale answer.
Greedy answers are deterministic, and sampled ones are fixed by their seed, so a cached answer
is the one the model would give again (llama.cpp on the same machine and thread count).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from dsonet.learn.chat import Chat, Completion, check_args
from dsonet.learn.llama_engine import Generated, Request
from dsonet.learn.prompts import PROMPTS_VERSION


CHUNK = 16  # answers generated together and saved at once: an interrupted run loses at most these


class CachedLLM:
    def __init__(self, llm, path: str | Path):
        self.llm = llm
        self.path = Path(path)
        self.db = _answers_file(self.path, "answers (key TEXT PRIMARY KEY, texts TEXT NOT NULL, "
                                           "prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL)")
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @property
    def name(self) -> str:
        return self.llm.name

    def __getattr__(self, attr):  # count_tokens, chat_prompt, threads ... of the wrapped back end
        return getattr(self.llm, attr)

    def _key(self, chat: Chat, n: int, temperature: float, max_tokens: int, seed: int | None) -> str:
        blob = json.dumps([self.llm.name, PROMPTS_VERSION, list(chat), n, temperature, max_tokens, seed],
                          sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def cached(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
               seed: int | None = None) -> list[Completion | None]:
        """What `generate` would replay from disk for each chat (None where it would have to generate)."""
        return self._stored([self._key(c, n, temperature, max_tokens, seed) for c in chats])

    def _stored(self, keys: Sequence[str]) -> list[Completion | None]:
        out: list[Completion | None] = []
        with self._lock:
            for key in keys:
                row = self.db.execute("SELECT texts, prompt_tokens, completion_tokens FROM answers WHERE key = ?",
                                      (key,)).fetchone()
                out.append(None if row is None else Completion(tuple(json.loads(row[0])), row[1], row[2]))
        return out

    def generate(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
                 seed: int | None = None) -> list[Completion]:
        check_args(chats, n, temperature, max_tokens)
        keys = [self._key(c, n, temperature, max_tokens, seed) for c in chats]
        out = self._stored(keys)
        todo = [i for i, c in enumerate(out) if c is None]
        self.hits += len(chats) - len(todo)
        self.misses += len(todo)
        step = max(1, CHUNK // n)
        for start in range(0, len(todo), step):  # decoded together, saved as soon as the chunk exists
            chunk = todo[start:start + step]
            done = self.llm.generate([chats[i] for i in chunk], n=n, temperature=temperature, max_tokens=max_tokens,
                                     seed=seed)
            with self._lock:
                self.db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)",
                                    [(keys[i], json.dumps(c.texts), c.prompt_tokens, c.completion_tokens)
                                     for i, c in zip(chunk, done)])
            for i, c in zip(chunk, done):
                out[i] = c
        return out  # type: ignore[return-value]


class CachedRuns:
    """`LlamaCppLLM.run` (a served model's engine, `dsonet.serve.ServedModel.run`) remembering every sequence it
    finishes, so a demo's served agents answer a warm rerun from disk as its other acts do. The key is all that
    decides a sequence: the model's name, the prompt's tokens, temperature, max_tokens, seed, stop strings and
    grammar. A replayed sequence reaches its caller as a generated one does (its text in one streamed piece,
    then ``on_done``); a cancelled one is not kept."""

    def __init__(self, run: Callable[..., list[Generated]], name: str, path: str | Path):
        self._run, self.name = run, name
        self.db = _answers_file(Path(path), "runs (key TEXT PRIMARY KEY, text TEXT NOT NULL, tokens INTEGER NOT NULL, "
                                            "finish TEXT NOT NULL)")
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __call__(self, requests: Sequence[Request], intake: Callable[[], Sequence[Request]] | None = None
                 ) -> list[Generated]:
        requests = list(requests)
        out = [self._replayed(r) for r in requests]
        todo = [i for i, g in enumerate(out) if g is None]

        def fresh() -> list[Request]:  # sequences arriving meanwhile: the cached ones are answered at once
            return [self._keeping(r) for r in intake() if self._replayed(r) is None]

        if todo or intake is not None:
            for i, g in zip(todo, self._run([self._keeping(requests[i]) for i in todo],
                                            intake=fresh if intake is not None else None)):
                out[i] = g
        return out  # type: ignore[return-value]

    def _key(self, r: Request) -> str:
        blob = json.dumps([self.name, list(r.tokens), r.temperature, r.max_tokens, r.seed, list(r.stop), r.grammar])
        return hashlib.sha256(blob.encode()).hexdigest()

    def _replayed(self, r: Request) -> Generated | None:
        with self._lock:
            row = self.db.execute("SELECT text, tokens, finish FROM runs WHERE key = ?", (self._key(r),)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        generated = Generated(*row)
        if r.on_text is not None and generated.text:
            r.on_text(generated.text)
        if r.on_done is not None:
            r.on_done(generated)
        return generated

    def _keeping(self, r: Request) -> Request:
        key, then = self._key(r), r.on_done

        def done(g: Generated) -> None:
            if g.finish != "cancelled":
                with self._lock:
                    self.db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?)", (key, g.text, g.tokens, g.finish))
            if then is not None:
                then(g)
        return replace(r, on_done=done)


def _answers_file(path: Path, table: str) -> sqlite3.Connection:
    """The cache file (one file holds both tables), shared by threads; ``table``: its name and columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"CREATE TABLE IF NOT EXISTS {table}")
    return db


def answer_counts(*llms) -> dict[str, int]:
    """How many answers these models generated and how many came from their answer caches (a model
    passed twice, as an agent that is its own reflector, counts once; an uncached one not at all)."""
    cached = {id(m): m for m in llms if isinstance(m, CachedLLM)}.values()
    return {"generated": sum(m.misses for m in cached), "from_cache": sum(m.hits for m in cached)}
