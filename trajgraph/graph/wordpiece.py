"""BERT's uncased WordPiece tokenizer in pure Python, for the static embedder.

The same steps as the ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece`` of the
packaged all-MiniLM-L6-v2 ``tokenizer.json``: drop control characters, spaces around CJK
characters, lower-case and strip accents, split on whitespace and punctuation, then greedy
longest-match-first word pieces (``##`` continuations, ``[UNK]`` for a word that does not
split). Whitespace-separated chunks repeat a lot in logs, so each chunk's ids are memoized.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

MAX_WORD_CHARS = 100  # longer words are one [UNK], as in BERT
_MEMO_LIMIT = 200_000  # chunks remembered; cleared when full (cheap to rebuild)
# ASCII control characters BERT drops (terminal escapes in logs); \t \n \r are whitespace.
_ASCII_CONTROLS = {cp: None for cp in (*range(0, 9), 11, 12, *range(14, 32), 127)}


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # BERT counts every non-alphanumeric ASCII character as punctuation ($, +, ^, ` ...).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WordPiece:
    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self._ids = {tok: i for i, tok in enumerate(vocab)}
        self.unk = self._ids["[UNK]"]
        self._memo: dict[str, list[int]] = {}

    @classmethod
    def from_file(cls, path: Path) -> WordPiece:
        return cls(path.read_text(encoding="utf-8").splitlines())

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text``, without [CLS] and [SEP]."""
        out: list[int] = []
        memo = self._memo
        text = text.translate(_ASCII_CONTROLS) if text.isascii() else _normalize_unicode(text)
        for chunk in text.split():
            got = memo.get(chunk)
            if got is None:
                got = self._chunk(chunk)
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                memo[chunk] = got
            out.extend(got)
        return out

    def _chunk(self, chunk: str) -> list[int]:
        out: list[int] = []
        word: list[str] = []
        for ch in chunk.lower() if chunk.isascii() else chunk:
            if _is_punctuation(ch):
                if word:
                    out.extend(self._word("".join(word)))
                    word = []
                out.append(self._ids.get(ch, self.unk))
            else:
                word.append(ch)
        if word:
            out.extend(self._word("".join(word)))
        return out

    def _word(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        ids = self._ids
        pieces: list[int] = []
        start, n = 0, len(word)
        while start < n:
            end = n
            found = -1
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = ids.get(piece, -1)
                if found >= 0:
                    break
                end -= 1
            if found < 0:
                return [self.unk]
            pieces.append(found)
            start = end
        return pieces


def _normalize_unicode(text: str) -> str:
    """Clean, CJK spacing, lower case and accent stripping for non-ASCII text."""
    chars: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD:
            continue
        cat = unicodedata.category(ch)
        if ch in "\t\n\r" or cat == "Zs":
            chars.append(" ")
        elif cat.startswith("C"):
            continue
        elif _is_cjk(cp):
            chars.append(f" {ch} ")
        else:
            chars.append(ch)
    lowered = unicodedata.normalize("NFD", "".join(chars).lower())
    return "".join(ch for ch in lowered if unicodedata.category(ch) != "Mn")
