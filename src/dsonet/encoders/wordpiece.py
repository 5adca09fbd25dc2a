"""BERT's uncased WordPiece tokenizer in plain Python: what Hugging Face's `tokenizers` does for
all-MiniLM-L6-v2 (its tokenizer.json: BertNormalizer, BertPreTokenizer, WordPiece, [CLS] A [SEP]),
without the Rust package and the hub client it depends on.

    text → special tokens split out → clean (controls dropped, whitespace → ' ') → CJK chars
    spaced → NFD, non-spacing marks dropped → lowercased char by char → split on whitespace and
    punctuation → greedy longest-match WordPiece (## continuations; a word that does not split
    whole, or is over 100 chars, is one [UNK]) → truncated → [CLS] … [SEP]

The comparison with `tokenizers` on real and awkward texts is `tests/encoders/test_numpy_encoder.py`.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_WORD_CHARS = 100  # WordPiece's max_input_chars_per_word
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL) + ")")
_TAB_NEWLINE = frozenset("\t\n\r")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or unicodedata.category(ch)[0] == "P"


@lru_cache(maxsize=65536)
def _normalise_char(ch: str) -> str:
    """One input char after BertNormalizer (clean_text, CJK spacing, accents stripped, lowercase)."""
    if ch in _TAB_NEWLINE:  # control chars by category, but whitespace to BERT
        return " "
    if unicodedata.category(ch)[0] == "C" or ch == "\ufffd":  # controls, format chars, U+0000: dropped
        return ""
    if ch.isspace():
        return " "
    if _is_cjk(ord(ch)):
        return f" {ch} "
    stripped = "".join(c for c in unicodedata.normalize("NFD", ch) if unicodedata.category(c) != "Mn")
    return "".join(c.lower() for c in stripped)  # char by char: no final-sigma rule, as in the Rust normaliser


def _words(text: str) -> list[str]:
    """Normalised text split on whitespace, each punctuation char a word of its own."""
    words: list[str] = []
    current: list[str] = []
    for ch in "".join(_normalise_char(c) for c in text):
        if ch.isspace():
            if current:
                words.append("".join(current))
                current = []
        elif _is_punctuation(ch):
            if current:
                words.append("".join(current))
                current = []
            words.append(ch)
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


class WordPiece:
    """``WordPiece(vocab_txt).encode(text, max_length)`` -> token ids, [CLS] and [SEP] included."""

    def __init__(self, vocab_path: str | Path):
        tokens = Path(vocab_path).read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        self.vocab = {token: i for i, token in enumerate(tokens)}
        missing = [s for s in SPECIAL if s not in self.vocab]
        if missing:
            raise ValueError(f"{vocab_path}: not a BERT vocabulary (no {', '.join(missing)})")
        self.unk, self.cls, self.sep = self.vocab["[UNK]"], self.vocab["[CLS]"], self.vocab["[SEP]"]
        self._pieces: dict[str, tuple[int, ...]] = {}  # word -> its ids: texts repeat words

    def encode(self, text: str, max_length: int = 256) -> list[int]:
        ids: list[int] = []
        for part in _SPECIAL_SPLIT.split(text):
            if part in SPECIAL:
                ids.append(self.vocab[part])
            elif part:
                for word in _words(part):
                    ids.extend(self._word_ids(word))
        return [self.cls, *ids[: max_length - 2], self.sep]

    def _word_ids(self, word: str) -> tuple[int, ...]:
        cached = self._pieces.get(word)
        if cached is None:
            cached = self._pieces[word] = tuple(self._split(word)) if len(word) <= MAX_WORD_CHARS else (self.unk,)
        return cached

    def _split(self, word: str) -> list[int]:
        """Greedy longest-match-first pieces; [UNK] alone when some part of the word matches nothing."""
        ids, start = [], 0
        while start < len(word):
            end, piece = len(word), None
            while end > start:
                piece = self.vocab.get(word[start:end] if start == 0 else "##" + word[start:end])
                if piece is not None:
                    break
                end -= 1
            if piece is None:
                return [self.unk]
            ids.append(piece)
            start = end
        return ids
