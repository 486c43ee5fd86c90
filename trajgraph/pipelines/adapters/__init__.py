"""Format adapters: one file's bytes -> records (``split_records``) -> canonical trajectories
(``normalize``).

Splitting does only what must see the whole file (container type, top-level JSON shape), so
that a bad JSONL line or array element fails alone later, in ``normalize``, with its locator.
The mapping of each format onto turns is documented in docs/formats.md and in each module;
the formats themselves are ``detect.REGISTRY``, one ``LogFormat`` each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trajgraph.core.errors import ConfigError, InputError
from trajgraph.pipelines.adapters import canonical, swe_agent
from trajgraph.pipelines.adapters.base import LineFile, RawRecord, parse_json
from trajgraph.pipelines.adapters.detect import (
    BY_NAME,
    FORMATS,
    describe,
    matches,
    sniff,
    sniff_line_file,
    unknown_format,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "FORMATS",
    "LineFile",
    "OversizeRecord",
    "RawRecord",
    "normalize",
    "split_records",
]

DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024

_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_PARQUET_MAGIC = b"PAR1"
_BOM = b"\xef\xbb\xbf"
_NON_SPACE = re.compile(rb"\S")


@dataclass(frozen=True)
class OversizeRecord:
    """Stands in for a JSONL line over the size limit, so it fails alone in ``normalize``
    without carrying its bytes through the pipeline."""

    size: int
    limit: int


# --------------------------------------------------------------------------- splitting


def split_records(
    source: str,
    data: bytes,
    fmt: str | None = None,
    *,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[RawRecord]:
    """Split one file into records; ``fmt`` (``--format``) skips detection.

    Raises InputError for problems of the whole file (encoding of a whole-JSON file, JSON
    syntax, unknown or mismatched format, size, unreadable Parquet) and ConfigError for a
    format name that does not exist.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    name = source.lower()
    is_parquet = name.endswith(".parquet") or (
        data[:4] == _PARQUET_MAGIC and data[-4:] == _PARQUET_MAGIC
    )
    if fmt == "parquet" or (is_parquet and fmt in (None, "canonical")):
        yield from _parquet_records(source, data)
    elif is_parquet:
        raise InputError(f"file is Parquet but the format given is {fmt!r}", source=source)
    elif name.endswith(_JSONL_SUFFIXES):
        yield from _jsonl_records(source, data, fmt, max_record_bytes)
    else:
        yield from _json_records(source, data, fmt, max_record_bytes)


def _decode(data: bytes, source: str, locator: str = "") -> str:
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"invalid UTF-8 at byte {e.start}: {e.reason}", source=source, locator=locator
        ) from e


def _jsonl_records(
    source: str, data: bytes, fmt: str | None, max_record_bytes: int
) -> Iterator[RawRecord]:
    known = BY_NAME.get(fmt) if fmt is not None else None
    if known is not None and known.spans_lines:
        whole: str | None = fmt
    else:
        # A chat log may be one message per line (one record) or one conversation per line.
        sniffed = sniff_line_file(data) if known is None or known.line is not None else None
        whole = sniffed if known is None or sniffed == fmt else None
    if whole is not None:
        # A transcript or trace export: one trajectory spans the lines, so the file is one
        # record and its adapter reads the lines (and forgives a torn last one).
        if len(data) > max_record_bytes:
            raise InputError(
                f"{whole} file is {len(data)} bytes, over the {max_record_bytes}-byte record "
                "limit (--max-record-bytes)",
                source=source,
            )
        yield RawRecord(source=source, locator="file", format=whole, payload=LineFile(data))
        return
    pos, lineno, first = 0, 0, True
    while pos <= len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            end = len(data)
        lineno += 1
        line = data[pos:end]
        pos = end + 1
        if lineno == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if not line.strip():
            continue
        payload: Any = line
        if len(line) > max_record_bytes:
            payload = OversizeRecord(len(line), max_record_bytes)
        alone = first and _NON_SPACE.search(data, pos) is None
        first = False
        yield RawRecord(
            source=source, locator=f"line {lineno}", format=fmt, payload=payload, alone=alone
        )


def _starts_line(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return line_start > 0 and not text[line_start:pos].strip()


def _not_json(text: str, e: json.JSONDecodeError) -> str:
    """A hint for a file that is no JSON at all (a CSV or TSV table, a plain-text log)."""
    if e.pos != len(text) - len(text.lstrip()):
        return ""  # broken JSON, not another kind of file
    return (
        " (the file does not start like JSON: trajgraph reads JSON, JSONL and Parquet; "
        "convert a CSV/TSV table or text log to canonical JSONL, see "
        "docs/formats.md#bring-your-own-format)"
    )


def _json_records(
    source: str, data: bytes, fmt: str | None, max_record_bytes: int
) -> Iterator[RawRecord]:
    if len(data) > max_record_bytes:
        raise InputError(
            f"file is {len(data)} bytes, over the {max_record_bytes}-byte limit for one JSON "
            "document; write it as JSONL (one trajectory per line) instead",
            source=source,
        )
    text = _decode(data, source)
    if not text.strip():
        raise InputError("file is empty", source=source)
    try:
        obj = parse_json(text)
    except json.JSONDecodeError as e:
        # Several JSON values one per line in a .json file: it is really JSONL.
        if e.msg == "Extra data" and _starts_line(text, e.pos):
            yield from _jsonl_records(source, data, fmt, max_record_bytes)
            return
        raise InputError(
            f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}{_not_json(text, e)}",
            source=source,
        ) from e
    except ValueError as e:  # a non-finite number, an integer of thousands of digits
        raise InputError(f"unusable JSON: {e}", source=source) from e
    yield from _records_of(source, obj, fmt)


def _records_of(source: str, obj: Any, fmt: str | None) -> Iterator[RawRecord]:
    if fmt is not None:
        yield from _explicit_records(source, obj, fmt)
        return
    traj_file = source.lower().endswith(".traj") and swe_agent.fits(obj)
    detected = swe_agent.FORMAT if traj_file else None
    detected = detected or sniff(obj)
    if detected is not None:
        yield RawRecord(source=source, locator="file", format=detected, payload=obj)
        return
    if isinstance(obj, list) and obj:
        formats = [sniff(item) for item in obj]
        if any(f is not None for f in formats):
            alone = len(obj) == 1
            for n, (item, f) in enumerate(zip(obj, formats, strict=True)):
                yield RawRecord(
                    source=source, locator=f"item {n}", format=f, payload=item, alone=alone
                )
            return
    if isinstance(obj, list) and not obj:
        raise InputError("file holds an empty JSON array: no trajectories", source=source)
    raise InputError(
        unknown_format(obj, what="the file holds "),
        source=source,
    )


def _explicit_records(source: str, obj: Any, fmt: str) -> Iterator[RawRecord]:
    shape = BY_NAME[fmt].shape
    if isinstance(obj, list) and BY_NAME[fmt].episodes_per_array and not matches(fmt, obj):
        if not obj:
            raise InputError("file holds an empty JSON array: no trajectories", source=source)
        if not matches(fmt, obj[0]):
            raise InputError(
                f"format {fmt!r} does not fit: expected {shape} per element, got {describe(obj)}",
                source=source,
            )
        for n, item in enumerate(obj):
            yield RawRecord(
                source=source, locator=f"item {n}", format=fmt, payload=item, alone=len(obj) == 1
            )
        return
    if not matches(fmt, obj):
        raise InputError(
            f"format {fmt!r} does not fit: expected {shape}, got {describe(obj)}",
            source=source,
        )
    yield RawRecord(source=source, locator="file", format=fmt, payload=obj)


def _parquet_records(source: str, data: bytes) -> Iterator[RawRecord]:
    import pyarrow as pa  # deferred: only Parquet inputs pay for the import
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InputError(f"unreadable Parquet: {e}", source=source) from e
    missing = [c for c in ("id", "turns") if c not in table.column_names]
    if missing:
        raise InputError(
            f"Parquet file is not canonical trajectories: missing column(s) {missing}; "
            f"columns are {table.column_names}",
            source=source,
        )
    n = 0
    for batch in table.to_batches():
        for row in batch.to_pylist():
            yield RawRecord(
                source=source,
                locator=f"row {n}",
                format="parquet",
                payload=row,
                alone=table.num_rows == 1,
            )
            n += 1


# --------------------------------------------------------------------------- normalizing


def normalize(
    record: RawRecord, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
) -> list[dict[str, Any]]:
    """Parse (if still bytes), detect the format (if unknown) and adapt one record.

    Returns canonical trajectory dicts (normally one); they are not validated here (that is
    ``schemas.trajectory.validate``, which also fills defaults such as the tenant). Every
    failure is an InputError carrying the record's source and locator.
    """

    def fail(reason: str) -> InputError:
        return InputError(reason, source=record.source, locator=record.locator)

    obj = _parse_payload(record, max_record_bytes, fail)
    fmt = record.format
    if isinstance(obj, LineFile) and fmt is None:
        fmt = sniff_line_file(obj.data)
    if not isinstance(obj, (dict, list, LineFile)):
        raise fail(f"expected a JSON object (one trajectory), got {describe(obj)}")
    if fmt is None:
        fmt = sniff(obj)
        if fmt is None and isinstance(obj, list):
            raise fail(f"expected a JSON object (one trajectory), got {describe(obj)}")
        if fmt is None:
            raise fail(unknown_format(obj))
    known = BY_NAME.get(fmt)
    if known is None:
        raise fail(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    try:
        return _record_ids(known.read(obj, source=record.source), obj, record)
    except InputError as e:
        raise fail(e.reason) from e
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        IndexError,
        RecursionError,
        OverflowError,
    ) as e:
        # Logs are untrusted input: an odd shape the adapter did not foresee is the record's
        # failure (dead-lettered with its locator), not a crash of the whole pipeline.
        raise fail(f"cannot normalize as {fmt}: {type(e).__name__}: {e}") from e


def _record_ids(
    trajectories: list[dict[str, Any]], obj: Any, record: RawRecord
) -> list[dict[str, Any]]:
    """A record of a file of several (a JSONL line, an array item, a Parquet row) that names
    no id of its own is ``<file stem>/<locator>`` (``runs/line-3``), not the bare file stem:
    otherwise every such record after the first would be a duplicate of it. A file's only
    record keeps the stem, as a whole-file log does (and as it did before)."""
    if record.locator == "file" or record.alone:
        return trajectories
    stem = canonical.file_stem(record.source)
    own = {v for v in obj.values() if isinstance(v, str)} if isinstance(obj, dict) else set()
    for traj in trajectories:
        if traj.get("id") == stem and stem not in own:
            traj["id"] = f"{stem}/{record.locator.replace(' ', '-')}"
    return trajectories


def _parse_payload(
    record: RawRecord, max_record_bytes: int, fail: Callable[[str], InputError]
) -> Any:
    payload = record.payload
    if isinstance(payload, LineFile):
        return payload
    if isinstance(payload, OversizeRecord):
        raise fail(f"record is {payload.size} bytes, over the {payload.limit}-byte limit")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        return payload
    raw = bytes(payload)
    if len(raw) > max_record_bytes:
        raise fail(f"record is {len(raw)} bytes, over the {max_record_bytes}-byte limit")
    text = _decode(raw, record.source, record.locator)
    try:
        return parse_json(text)
    except json.JSONDecodeError as e:
        hint = " (the record ends early: truncated?)" if e.pos >= len(text.rstrip()) else ""
        where = f"line {e.lineno} column {e.colno}" if e.lineno > 1 else f"column {e.colno}"
        raise fail(f"invalid JSON at {where}: {e.msg}{hint}") from e
    except ValueError as e:  # a non-finite number, an integer of thousands of digits
        raise fail(f"unusable JSON: {e}") from e
