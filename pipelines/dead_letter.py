"""Dead-letter rows: every record that did not reach the graph, with where it came from and why."""

from __future__ import annotations

import json
import os
from typing import Any

from trajgraph.pipelines.adapters.base import Located, RawRecord, without_lone_surrogates
from trajgraph.redaction import redact

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
    data = getattr(element, "data", None)  # a streamed line (pipelines.streaming.Line)
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
