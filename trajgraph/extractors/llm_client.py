"""One chat-completion request to an OpenAI-compatible server, with trajgraph's only retry layer.

The openai client is built with ``max_retries=0``: retrying here, in one place, is what makes
the counters honest. Retried: 429 (after its Retry-After), 5xx, timeouts and connection
errors. Never retried: any other 4xx, which would fail the same way again.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

import jsonschema
import pydantic

from trajgraph.core.errors import LLMError, LLMReplyError
from trajgraph.core.settings import LOCAL_LLM_MODEL, LLMSettings
from trajgraph.extractors import structured as so
from trajgraph.extractors.base import Stats

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)
T = TypeVar("T")
M = TypeVar("M", bound=pydantic.BaseModel)
BACKOFF_BASE_S = 0.5
# The same request fails the same way for these: stop asking (the key, the model, the account).
FATAL_STATUSES = frozenset({401, 403, 404})
_HINTS = {
    401: " (check OPENAI_API_KEY)",
    403: " (check OPENAI_API_KEY and the account's access to the model)",
    404: " (check TRAJGRAPH_LLM_MODEL and OPENAI_BASE_URL, which usually ends in /v1)",
}
# Servers without a key still need one in the client; local servers ignore it.
PLACEHOLDER_KEY = "not-needed"


@dataclass(frozen=True)
class ChatReply:
    content: str | None
    refusal: str | None
    finish_reason: str | None
    prompt_tokens: int | None  # from the server's usage, when it sends one
    completion_tokens: int | None


@dataclass(frozen=True)
class StructuredReply:
    """A reply to ``complete_structured``, with what was actually sent to get it."""

    reply: ChatReply
    shape: so.Shape  # the dialect that the server accepted
    messages: list[dict[str, str]]  # as sent (the schema appended where the dialect needs it)


class ChatClient:
    def __init__(
        self,
        settings: LLMSettings,
        stats: Stats,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._settings = settings
        self._stats = stats
        self._sleep = sleep
        self._rng = rng or random.Random()
        # Trajectories and the packs of one trajectory are both extracted on threads; this
        # is the one bound on requests in flight per worker.
        self._in_flight = threading.BoundedSemaphore(settings.concurrency)
        missing = getattr(settings.api_key, "missing", "")
        if missing:  # a Beam worker that was not given the key (settings.Secret)
            raise LLMError(
                f"the OpenAI API key is not available here: {missing}. Workers read it from "
                "their own environment (OPENAI_API_KEY) or from the file OPENAI_API_KEY_FILE "
                "names (docs/scale-out.md)",
                fatal=True,
            )
        if settings.model == LOCAL_LLM_MODEL:  # TRAJGRAPH_LLM_MODEL=local, never started
            raise LLMError(
                "the local LLM is not running: start it with `trajgraph llm start`", fatal=True
            )
        # Imported here, not at the top: the API, MCP server and CLI import this module through
        # the router and remind but need openai (half a second of imports) only with an LLM.
        import openai

        self._client = openai.OpenAI(
            api_key=settings.api_key or (PLACEHOLDER_KEY if settings.base_url else None),
            base_url=settings.base_url,
            max_retries=0,
            timeout=settings.timeout_s,
        )

    def close(self) -> None:
        self._client.close()

    @property
    def raw(self) -> openai.OpenAI:
        """The openai client (max_retries=0) for calls to wrap in ``call``."""
        return self._client

    def complete(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any] | None,
        *,
        extra_body: dict[str, Any] | None = None,
    ) -> ChatReply:
        """Send one chat request, retrying transient failures; LLMError once it cannot succeed."""
        s = self._settings
        extra: dict[str, Any] = {}
        if s.max_output_tokens:
            # max_tokens too: llama-cpp-python and older vLLM read only that one.
            extra["max_completion_tokens"] = extra["max_tokens"] = s.max_output_tokens
        if s.temperature is not None:
            extra["temperature"] = s.temperature
        if response_format is not None:
            extra["response_format"] = response_format
        if extra_body:
            extra["extra_body"] = extra_body
        # Plain dicts, not the SDK's TypedDicts: the messages are built from data.
        resp = self.call(
            lambda: self._client.chat.completions.create(
                model=s.model,
                messages=messages,  # type: ignore[arg-type]
                **extra,
            )
        )
        return _reply(resp)

    def complete_structured(
        self, messages: list[dict[str, str]], name: str, schema: dict[str, Any]
    ) -> StructuredReply:
        """One chat request whose reply should be JSON valid against ``schema``, in the dialect
        this server understands (extractors/structured.py): probed once per server, then down
        its chain when it refuses a format. The reply is not validated here: callers do."""
        s = self._settings
        key = f"{s.base_url or 'api.openai.com'}|{s.model}"
        if s.response_format != "auto":
            chain: tuple[str, ...] = (s.response_format,)
            kind = "openai" if not s.base_url else "unknown"
        else:
            kind = self._server_kind(key)
            chain = so.CHAINS[kind]
        position = so.NEGOTIATOR.position(key) if len(chain) > 1 else 0
        for i in range(min(position, len(chain) - 1), len(chain)):
            sh = so.shape(chain[i], name, schema, kind)
            sent = so.with_schema_in_prompt(messages, schema) if sh.schema_in_prompt else messages
            try:
                reply = self.complete(sent, sh.response_format, extra_body=sh.extra_body)
            except LLMError as e:
                if (
                    i == len(chain) - 1
                    or isinstance(e, LLMReplyError)
                    or not so.is_format_rejection(e.status, str(e))
                ):
                    raise
                self._stats.inc("llm_format_fallbacks")
                log.warning(
                    "the LLM server (%s) refused %s (%s); trying %s",
                    kind,
                    chain[i],
                    e,
                    chain[i + 1],
                )
                continue
            if len(chain) > 1:
                so.NEGOTIATOR.settle(key, i)
            self._stats.inc(f"llm_format_{sh.dialect}")
            return StructuredReply(reply, sh, sent)
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def served_models(self) -> list[str]:
        """The ids the server lists (GET /models), with the retry policy; LLMError when it
        cannot answer."""
        page = self.call(lambda: self._client.models.list(), prefix="llm_models")
        return [str(m.id) for m in page.data if getattr(m, "id", None)]

    def _server_kind(self, key: str) -> str:
        """The kind of server at the base URL: asked once per process (GET /models)."""
        known = so.NEGOTIATOR.kind(key)
        if known is not None:
            return known
        import openai

        owners: list[str] = []
        if self._settings.base_url:
            self._stats.inc("llm_probes")
            try:
                with self._in_flight:
                    page = self._client.models.list()
                owners = [str(getattr(m, "owned_by", "") or "") for m in page.data]
            except (openai.OpenAIError, ValueError, TypeError) as e:
                # No /models (some proxies), or not up yet (not cached: asked again next time);
                # the generic chain finds the dialect by trying.
                log.info("LLM server probe failed (%s); trying each structured format", e)
                return "unknown"
        kind = so.server_kind(self._settings.base_url, owners)
        so.NEGOTIATOR.set_kind(key, kind)
        return so.NEGOTIATOR.kind(key) or kind

    def call(self, request: Callable[[], T], *, prefix: str = "llm") -> T:
        """``request()`` with the retry policy; counters go to ``<prefix>_calls`` and
        ``<prefix>_retries_<reason>``."""
        import openai

        s = self._settings
        last = ""
        for attempt in range(1, s.max_attempts + 1):
            self._stats.inc(f"{prefix}_calls")
            try:
                with self._in_flight:
                    return request()
            except openai.RateLimitError as e:
                reason, last = "429", _describe(e)
                delay = retry_after(e.response.headers) if e.response is not None else None
            except openai.InternalServerError as e:
                if so.is_format_rejection(e.status_code, _describe(e)):
                    # Not an outage: this server refuses the request's format (and would again).
                    raise LLMError(
                        f"the server refused the request: {_describe(e)}", status=e.status_code
                    ) from e
                reason, last, delay = "5xx", _describe(e), None
            except openai.APITimeoutError:  # before APIConnectionError: it is a subclass
                reason, last, delay = "timeout", f"no reply within {s.timeout_s:g}s", None
            except openai.APIConnectionError as e:
                reason, last, delay = "connection", _describe(e), None
            except openai.APIStatusError as e:
                hint = _HINTS.get(e.status_code, "")
                raise LLMError(
                    f"the server refused the request: {_describe(e)}{hint}",
                    status=e.status_code,
                    fatal=e.status_code in FATAL_STATUSES,
                ) from e
            except openai.OpenAIError as e:  # e.g. a reply body that is not what was asked
                raise LLMError(f"the OpenAI client failed: {e}") from e
            self._stats.inc(f"{prefix}_retries_{reason}")
            if attempt == s.max_attempts:
                break
            wait = delay if delay is not None else self._backoff(attempt)
            self._sleep(min(max(wait, 0.0), s.max_backoff_s))
        where = s.base_url or "api.openai.com"
        raise LLMError(f"the server at {where} failed {s.max_attempts} attempts; last: {last}")

    def _backoff(self, attempt: int) -> float:
        # Full jitter: concurrent workers that failed together do not retry together.
        return self._rng.uniform(0, min(self._settings.max_backoff_s, BACKOFF_BASE_S * 2**attempt))


def reply_text(reply: ChatReply) -> str | None:
    """The reply's content; LLMReplyError when the model refused to answer."""
    if reply.refusal:
        raise LLMReplyError(f"the model refused: {reply.refusal}")
    return reply.content


def structured(content: str | None, model: type[M], schema: dict[str, Any]) -> M:
    """A JSON reply as ``model``, validated against its strict JSON ``schema`` first;
    LLMReplyError (saying why) when it cannot be used."""
    try:
        data = so.loads_reply(content or "")
    except json.JSONDecodeError as e:
        raise LLMReplyError(f"not JSON: {e.msg}") from e
    try:
        jsonschema.validate(data, schema)
        return model.model_validate(data)
    except jsonschema.ValidationError as e:
        raise LLMReplyError(f"schema: {e.message}") from e
    except pydantic.ValidationError as e:
        raise LLMReplyError(f"schema: {e}") from e


def optional_chat_client(settings: LLMSettings) -> ChatClient | None:
    """The client for question-time LLM calls (router, reminders, judge) when a model is
    configured; None means the offline rules answer."""
    return ChatClient(settings, Stats()) if settings.configured else None


def retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _describe(e: openai.OpenAIError) -> str:
    status = getattr(e, "status_code", None)
    message = getattr(e, "message", None) or str(e)
    return f"{status} {message}" if status else message


def _reply(resp: Any) -> ChatReply:
    try:
        choice = resp.choices[0]
    except (AttributeError, IndexError, TypeError) as e:
        raise LLMReplyError("the LLM server replied without a choice") from e
    usage = getattr(resp, "usage", None)
    return ChatReply(
        content=choice.message.content,
        refusal=getattr(choice.message, "refusal", None),
        finish_reason=choice.finish_reason,
        prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
        completion_tokens=getattr(usage, "completion_tokens", None) if usage else None,
    )
