"""Credentials never reach a message, a log line, a dead-letter row or a reply.

Two nets, both applied by :func:`redact`:

* the secrets this process was configured with (Neo4j password, OpenAI keys, API keys),
  remembered by value when the settings are loaded (:func:`remember_secrets`): whatever
  echoes them (an LLM server quoting the Authorization header in its error, a driver
  quoting a URI) prints ``***`` instead;
* patterns of credentials anyone's server may echo: a URL's ``user:password@``, bearer
  tokens, ``sk-...`` keys, ``password=...`` / ``"api_key": "..."`` pairs.

:func:`install_log_redaction` makes every log record pass through :func:`redact` (its
message and its traceback), whatever handler prints it. The CLI, the HTTP API and the MCP
server install it.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Shorter values are not remembered: masking "neo4j" or "1234" everywhere would garble
# messages, and a credential that short is not protected by masking anyway.
MIN_SECRET_CHARS = 8

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)\S*@")
_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]{6,}"), rf"\1\2{MASK}"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), f"sk-{MASK}"),
    (
        re.compile(
            r"(?i)(?<![a-z])(api[_\-]?key|password|passwd|secret|access[_\-]?token|auth[_\-]?token)"
            r"(\"?\s*[=:]\s*\"?)[^\s\"',;&}]+"
        ),
        rf"\1\2{MASK}",
    ),
)

_secrets: set[str] = set()
_lock = threading.Lock()


def remember_secrets(values: Iterable[str | None]) -> None:
    """Mask these values wherever :func:`redact` runs from now on (this process)."""
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= MIN_SECRET_CHARS)


def redact(text: str) -> str:
    """``text`` without credentials: remembered secrets, a URL's user information, bearer
    tokens, API keys and ``password=`` style pairs are replaced by ``***``."""
    for secret in sorted(_secrets, key=len, reverse=True):  # longest first: no partial masks
        if secret in text:
            text = text.replace(secret, MASK)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process from now on (idempotent): the message with
    its arguments, and the traceback, are formatted and redacted when the record is made."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    make = logging.getLogRecordFactory()

    def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        _redact_record(record)
        return record

    logging.setLogRecordFactory(redacting_factory)


def _redact_record(record: logging.LogRecord) -> None:
    if isinstance(record.args, tuple) and record.name.startswith("uvicorn.access"):
        # The access formatter reads its arguments (client, method, path, status) one by one.
        record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
    else:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return
        record.msg, record.args = redact(message), None
    if record.exc_info and record.exc_info[0] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        record.exc_text = redact(text)  # formatters print the cached text
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
