"""What every format adapter shares: the record of a log format (``LogFormat``, registered in
``detect.REGISTRY``), the raw record handed between read and normalize, and the one JSON
parser for untrusted records."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Re-exported: the adapters' and the dead letters' text repair is the errors' own.
from trajgraph.core.errors import without_lone_surrogates as without_lone_surrogates

Reader = Callable[..., list[dict[str, Any]]]  # (obj, *, source) -> canonical trajectory dicts
Predicate = Callable[[Any], bool]


@dataclass(frozen=True)
class LogFormat:
    """One log format: the one record of it that detection, ``--format``'s choices, error
    messages and the table of docs/formats.md are derived from (``detect.REGISTRY`` lists them
    in the order sniffing tries them). Each adapter module declares its own."""

    name: str
    read: Reader
    # Whether a parsed JSON value has this format's shape: a look at the top level only (a
    # few keys, the first elements), never the whole log, so sniffing stays cheap.
    fits: Predicate
    shape: str  # what the format looks like, in words (error messages, the docs table)
    # A top-level JSON array of these holds one episode per element (one record each).
    episodes_per_array: bool = False
    # Recognises a first line of a JSONL file whose lines together make the log: such a file
    # is one record (a ``LineFile``) that the reader parses itself.
    line: Predicate | None = None
    # Given by ``--format``, a JSONL file of this format is always one ``LineFile`` record.
    spans_lines: bool = False
    # Tried by sniffing a parsed value; False for a format told by its file type (Parquet).
    sniffed: bool = True


def is_list_of_dicts(value: Any) -> bool:
    """A list whose first elements are JSON objects (a step list, a message list)."""
    return isinstance(value, list) and all(isinstance(v, dict) for v in value[:5])


def holds_list(obj: Any, key: str) -> bool:
    """An object with a list of JSON objects under ``key``."""
    return isinstance(obj, dict) and is_list_of_dicts(obj.get(key))


def one_or_array_of(is_record: Predicate) -> Predicate:
    """The shape of a format whose records are the lines of a JSONL file, handed over as
    JSON: an array whose first elements are all records, or one record alone."""

    def fits(obj: Any) -> bool:
        if isinstance(obj, list):
            return bool(obj) and all(is_record(r) for r in obj[:5])
        return is_record(obj)

    return fits


@dataclass(frozen=True)
class RawRecord:
    """One input record before normalization.

    ``payload`` is either bytes (a JSONL line not yet parsed, so one bad line fails alone) or
    an already parsed JSON value (an element of a JSON array file, a Parquet row, a whole file).
    ``locator`` names the record inside its file: ``line 7``, ``item 2``, ``row 5`` or ``file``.
    """

    source: str
    locator: str
    format: str | None
    payload: Any
    # The only record of a file that could hold several (a one-line JSONL file, a one-item
    # array, a one-row Parquet file): named like a whole file when it names no id.
    alone: bool = False


@dataclass(frozen=True)
class Located:
    """A normalized trajectory together with the record it came from (for dead-letter rows)."""

    source: str
    locator: str
    trajectory: dict[str, Any]
    # The stream's version of this trajectory (higher is newer; 0: a batch read, one version).
    version: int = 0


@dataclass(frozen=True)
class LineFile:
    """A whole JSONL file as one record: formats whose one trajectory spans many lines (a
    Claude Code transcript, an OTLP file export). The adapter parses the lines itself, so a
    torn last line of a file still being written is its call, not a parse failure."""

    data: bytes

    def __repr__(self) -> str:  # never print a whole session in a log line
        return f"LineFile({len(self.data)} bytes)"


class NonFiniteNumber(ValueError):
    """A JSON number that is not a finite float (NaN, Infinity, 1e400): refused, because the
    graph and every JSON reply would carry it on."""


class NestingTooDeep(ValueError):
    """JSON nested deeper than ``MAX_JSON_DEPTH``: refused like any other unreadable record."""


# Deeper than this, a parsed value is refused at once. Python's parser itself reaches about
# 1,000 levels, but every later step that walks a record recurses too, from inside Beam's
# own deep stack: pickling it between steps, copying, validating. A record of 800 levels
# parsed and then broke the pickling of its own bundle (a traceback that lost the whole run).
# Real logs nest a few dozen levels (an OTLP attribute tree: about 4 per level of the value).
MAX_JSON_DEPTH = 128
TOO_DEEP = f"JSON nested too deeply to read (over {MAX_JSON_DEPTH} levels)"

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` for untrusted records: NaN, Infinity and numbers that overflow a float
    are refused (NonFiniteNumber), and so is nesting deeper than the parser recurses
    (NestingTooDeep); a lone surrogate escape (``"\\ud800"``, e.g. an emoji cut
    in half by a log's truncation) becomes U+FFFD, since no UTF-8 writer (Neo4j's driver,
    a JSON reply) can carry it. Raises ValueError (json.JSONDecodeError included)."""
    if isinstance(text, (bytes, bytearray)):
        # As json.loads decodes bytes: a surrogate encoded in the bytes (ED A0 BD, written
        # by a writer that allowed it) is decoded, and repaired below like an escaped one.
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    try:
        obj = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as e:
        raise NestingTooDeep(TOO_DEEP) from e
    if nesting_depth(obj) > MAX_JSON_DEPTH:
        raise NestingTooDeep(TOO_DEEP)
    if _SURROGATE_ESCAPE.search(text) or without_lone_surrogates(text) is not text:
        return _repair_surrogates(obj)
    return obj


def nesting_depth(value: Any, stop: int = MAX_JSON_DEPTH) -> int:
    """How deep lists and objects nest in ``value`` (a scalar: 0), counted without recursion
    and no further than ``stop + 1``."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > stop:
                return deepest
        todo.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(f"{text[:40]} is not a finite number")
    return value


def _repair_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, list):
        return [_repair_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_repair_surrogates(k): _repair_surrogates(v) for k, v in value.items()}
    return value


@dataclass
class Lines:
    """The parsed JSON objects of a ``LineFile``, with what could not be read."""

    records: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)
    torn_last_line: bool = False


def read_lines(
    raw: Iterable[bytes | str], keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> Lines:
    """Parse the lines of a ``LineFile`` with :func:`parse_json` (a lone surrogate becomes
    U+FFFD, a line nested too deeply or holding NaN is unreadable); a last line that does not
    parse is torn (being written), one in the middle (or a line that is not an object) is a
    bad line. ``keep`` maps each record to what is kept of it (all of it by default)."""
    out = Lines()
    pending_bad: int | None = None
    for lineno, line in enumerate(raw, start=1):
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        if pending_bad is not None:  # a bad line followed by more lines was not torn
            out.bad_lines.append(pending_bad)
            pending_bad = None
        try:
            obj = parse_json(line)
        except ValueError:  # torn, nested too deeply, a non-finite number
            pending_bad = lineno
            continue
        if isinstance(obj, dict):
            out.records.append(keep(obj) if keep else obj)
        else:
            out.bad_lines.append(lineno)
    out.torn_last_line = pending_bad is not None
    return out


def lines_of(obj: Any) -> Lines | None:
    """The records of a log whose lines make it (a ``LineFile``, or a JSON array of its lines,
    or one line alone); None for any other value."""
    if isinstance(obj, LineFile):
        return read_lines(split_lines(obj.data))
    if isinstance(obj, list):
        return Lines(records=[r for r in obj if isinstance(r, dict)])
    if isinstance(obj, dict):
        return Lines(records=[obj])
    return None


def split_lines(data: bytes) -> list[bytes]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.split(b"\n")


def iter_lines(data: bytes) -> Iterator[bytes]:
    """``data.split(b"\\n")`` one line at a time (no second copy of a large file at once)."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            yield data[start:]
            return
        yield data[start:end]
        start = end + 1
