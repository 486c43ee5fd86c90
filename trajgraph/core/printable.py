"""Standard output that escapes what could drive a terminal: logs are untrusted text."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from trajgraph.core.text import escape_unprintable


class PrintableStream:
    """A text stream that writes every unprintable character (trajgraph.core.text:
    control characters, separators, bidi overrides, lone surrogates) except newline and tab
    as ``\\uXXXX``: logs are untrusted, and an ESC or CSI in a log must not drive the
    terminal. JSON output stays valid (the escape is JSON's)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape_unprintable(text, keep="\n\t"))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def printable_stdout() -> Iterator[None]:
    """sys.stdout escapes unprintable characters within the block."""
    original = sys.stdout
    sys.stdout = PrintableStream(original)
    try:
        yield
    finally:
        sys.stdout = original
