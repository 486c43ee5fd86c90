"""Dead letters: every record that did not reach the graph, with where it came from and why.

The format's rows (``row``, ``from_exception``, ``to_json_line``), where a run puts them
(``dead_letter_dir``), how they are written (batch: one JSON-lines file per run,
``WriteJsonLines``; streaming: appended as they come, ``AppendDeadLetterFn``) and read back
(``read_json_lines``), in one module, as Beam's textio keeps a format's read and write
together.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any, NoReturn

import apache_beam as beam

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError
from trajgraph.core.redaction import redact
from trajgraph.pipelines import files
from trajgraph.pipelines.adapters.base import Located, RawRecord, without_lone_surrogates
from trajgraph.pipelines.preflight import dead_letter_root, utc_stamp

PREVIEW_CHARS = 500
# Taken before redaction: a credential straddling the preview's cut is masked whole, not
# left as a recognisable prefix.
_UNREDACTED_CHARS = 2 * PREVIEW_CHARS
# A reason is one error's message; some quote the whole record (a UnicodeEncodeError's repr):
# cut it, the preview shows the record.
REASON_CHARS = 2000


def _where(element: Any) -> tuple[str, str, str]:
    """(source, locator, preview) of whatever element a stage failed on; the preview is
    redacted (a log's own keys and passwords stay out of the dead letters)."""
    source, locator, preview = _unredacted_where(element)
    return source, locator, _preview(preview)


def _preview(text: str) -> str:
    return redact(text[:_UNREDACTED_CHARS])[:PREVIEW_CHARS]


def _unredacted_where(element: Any) -> tuple[str, str, str]:
    if isinstance(element, RawRecord):
        payload = element.payload
        if isinstance(payload, bytes | bytearray):
            preview = bytes(payload[:_UNREDACTED_CHARS]).decode("utf-8", "replace")
        else:
            preview = json.dumps(payload, ensure_ascii=False, default=str)[:_UNREDACTED_CHARS]
        return element.source, element.locator, preview
    if isinstance(element, str):  # a listed file's path
        return element, "file", ""
    if isinstance(element, bytes) and len(element) < 4096:  # as transforms.StatFileFn gets it
        return os.fsdecode(element), "file", ""
    metadata = getattr(element, "metadata", None)  # fileio.ReadableFile
    if metadata is not None and hasattr(metadata, "path"):
        return str(metadata.path), "file", ""
    if isinstance(element, Located):
        return element.source, element.locator, str(element.trajectory.get("id", ""))
    data = getattr(element, "data", None)  # a streamed line (pipelines.stream_transforms.Line)
    if isinstance(data, bytes) and hasattr(element, "source"):
        preview = data[:_UNREDACTED_CHARS].decode("utf-8", "replace")
        return str(element.source), str(getattr(element, "locator", "")), preview
    return "", "", repr(element)[:_UNREDACTED_CHARS]


def from_exception(stage: str, bad: tuple[Any, tuple[Any, str, Any]]) -> dict[str, Any]:
    """Shape a ``with_exception_handling`` bad output ``(element, (type, repr, traceback))``."""
    element, (exc_type, exc_repr, _tb) = bad
    source, locator, preview = _where(element)
    name = getattr(exc_type, "__name__", str(exc_type))
    reason = exc_repr if exc_repr.startswith(name) else f"{name}: {exc_repr}"
    return _encodable(
        {
            "stage": stage,
            "source": source,
            "locator": locator,
            "reason": _reason(reason),
            "preview": preview,
        }
    )


def row(stage: str, source: str, locator: str, reason: str) -> dict[str, Any]:
    return _encodable(
        {
            "stage": stage,
            "source": source,
            "locator": locator,
            "reason": _reason(reason),
            "preview": "",
        }
    )


def _encodable(r: dict[str, str]) -> dict[str, Any]:
    """Every field UTF-8 encodable: a reason or preview quoting a record's lone surrogate
    (a file name holding one) went on to Beam's coder, whose UnicodeEncodeError ended the
    whole run with a traceback instead of writing this dead letter."""
    return {k: without_lone_surrogates(str(v)) for k, v in r.items()}


def _reason(text: str) -> str:
    # Reasons may quote a server (an LLM error echoing its key): never write credentials.
    return redact(text)[:REASON_CHARS]


def to_json_line(r: dict[str, Any]) -> str:
    return json.dumps(r, ensure_ascii=False, sort_keys=True)


# -- where and how they are written, and read back --------------------------------------------


def dead_letter_dir(flag: str | None, settings: settings_mod.Settings) -> str:
    """``--dead-letter DIR`` (a local folder, or any Beam filesystem: ``gs://bucket/dl``),
    else a new local folder for this run."""
    folder = flag or str(dead_letter_root(settings) / f"{utc_stamp()}-{os.getpid()}")
    if any(c in folder for c in "[*?"):
        # Beam's file sinks match their own temporary files with the folder in a glob: such a
        # run would write the graph, then fail to move its dead letters into place.
        raise ConfigError(f"--dead-letter {folder!r}: a folder whose path holds [ * or ?")
    return folder


class WriteJsonLines(beam.PTransform):
    """Rows (dicts) → one JSON-lines file, ``<prefix>.jsonl``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def expand(self, rows: Any) -> Any:
        return (
            rows
            | "Serialize rows" >> beam.Map(to_json_line)
            | "Write file"
            >> beam.io.WriteToText(
                self._prefix, file_name_suffix=".jsonl", shard_name_template="", num_shards=1
            )
        )


class AppendDeadLetterFn(beam.DoFn):
    """Streaming has no end to write a file at: dead letters are appended as they come.

    Object stores (``gs://``, ``s3://``) cannot append: there each bundle's dead letters go
    to a new file beside the path, ``dead-letter-<unique>.jsonl``, through Beam's FileSystems.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._pending: list[str] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"_path": self._path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = state["_path"]
        self._lock = threading.Lock()
        self._pending = []

    def start_bundle(self) -> None:
        self._pending = []

    def process(self, row: dict[str, Any]) -> Iterator[NoReturn]:
        yield from ()  # a sink; still a generator, as Beam expects of process
        line = to_json_line(row) + "\n"
        if not files.is_local(self._path):
            self._pending.append(line)
            return
        with self._lock:
            os.makedirs(os.path.dirname(self._path) or ".", exist_ok=True)
            with open(self._path, "a", encoding="utf-8") as f:
                f.write(line)

    def finish_bundle(self) -> None:
        if self._pending:
            stem = self._path.removesuffix(".jsonl")
            files.write_bytes(f"{stem}-{uuid.uuid4().hex}.jsonl", "".join(self._pending).encode())
            self._pending = []


def read_json_lines(path: str) -> list[dict[str, Any]]:
    text = files.read_text(path)
    if text is None:
        return []
    # "\n" only: str.splitlines() also splits at U+2028, U+0085, ... which a dead-letter row
    # (ensure_ascii=False) may hold inside a string.
    return [json.loads(line) for line in text.split("\n") if line.strip()]
