"""The LLM extractor: windows → packed requests → validated, verbatim-checked findings.

Per trajectory: cached windows are taken from the cache; the rest are packed into requests
(see llm_prompt) sent with bounded concurrency. Each reply is validated against the strict
schema; an invalid one gets one repair request quoting the error; what is still invalid, or
could not be fetched, is extracted by the offline heuristic instead. No window is lost.

Counters (drained by the pipeline into the run summary): llm_calls, llm_retries_<reason>,
llm_prompt_tokens, llm_completion_tokens (the server's usage, else tiktoken),
llm_prompt_tokens_local, llm_windows, llm_cache_hits, llm_repairs, llm_fallbacks,
llm_rejected_identifiers, llm_rejected_refs, llm_splits, llm_errors, llm_truncated (and
_repaired / _unusable), llm_probes, llm_format_fallbacks and llm_format_<dialect> (requests
answered in each structured-output dialect, extractors/structured.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from trajgraph.core.errors import ConfigError, LLMError, LLMReplyError
from trajgraph.core.settings import LLMSettings, cache_max_bytes
from trajgraph.core.tokens import count_tokens
from trajgraph.extractors.base import ExtractionBatch, Stats, WindowByWindow
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.llm_cache import ExtractionCache, cache_key
from trajgraph.extractors.llm_client import ChatClient, ChatReply, StructuredReply, reply_text
from trajgraph.extractors.llm_prompt import (
    PROMPT_VERSION,
    REPLY_SCHEMA_NAME,
    Request,
    build_request,
    messages,
    pack,
    prompt_tokens,
    repair_messages,
)
from trajgraph.extractors.llm_reply import filter_reply, parse_reply
from trajgraph.extractors.structured import salvage_truncated
from trajgraph.extractors.windows import Window
from trajgraph.schemas.extraction import ExtractionReply, WindowExtraction, reply_json_schema

log = logging.getLogger(__name__)

# Requests that failed in a row, each after all its retries, before the server counts as down.
BREAKER_FAILURES = 3
# Outcomes of one request for its windows: findings, or why the heuristic must stand in.
_Result = dict[int, WindowExtraction | str]


class LLMExtractor(WindowByWindow):
    name = "llm"

    def __init__(self, settings: LLMSettings, *, use_cache: bool = True) -> None:
        if not settings.model:
            raise ConfigError(
                "the llm extractor needs a model: start the local one with `trajgraph llm "
                "start`, or set TRAJGRAPH_LLM_MODEL (and OPENAI_BASE_URL for a server other "
                "than api.openai.com)"
            )
        if settings.pack_tokens < 1:
            raise ConfigError("TRAJGRAPH_LLM_PACK_TOKENS must be positive")
        self.settings = settings
        self.use_cache = use_cache
        self.stats = Stats()
        # The structured-output dialect the server accepted last (extractors/structured.py).
        self._mode = settings.response_format
        self._fallback = HeuristicExtractor()
        # Created on first use, in the worker: none of these pickle.
        self._client: ChatClient | None = None
        self._cache: ExtractionCache | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._fatal: LLMError | None = None
        self._failed_in_a_row = 0
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        return f"llm:{self.settings.model}:{PROMPT_VERSION}"

    @property
    def label(self) -> str:
        """The ``extractor`` property of the states this extractor writes."""
        return f"llm:{self.settings.model}"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_client", "_cache", "_pool", "_lock", "stats"):
            state[k] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self.stats = Stats()

    def _open(self) -> None:
        with self._lock:
            if self._client is None:
                self._client = ChatClient(self.settings, self.stats)
                self._pool = ThreadPoolExecutor(
                    max_workers=self.settings.concurrency, thread_name_prefix="trajgraph-llm"
                )
                if self.settings.cache_path is not None:
                    self._cache = ExtractionCache(
                        self.settings.cache_path,
                        max_bytes=cache_max_bytes(self.settings.cache_max_mb),
                    )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._client is not None:
            self._client.close()
        if self._cache is not None:
            self._cache.close()
        self._client = self._pool = self._cache = None

    # -- the Extractor interface ------------------------------------------------------------

    def extract(self, window: Window) -> WindowExtraction:
        batch = self.extract_windows([window])
        if batch.failures:
            raise batch.failures[0][1]
        return batch.extractions[0]

    def extract_windows(self, windows: Sequence[Window], *, task: str = "") -> ExtractionBatch:
        """Findings for every window (LLM, cache or heuristic); LLMError only when the server
        rejects the configuration itself (wrong key or model), which no fallback should hide."""
        if self._fatal is not None:
            raise self._fatal
        self._open()
        assert self._pool is not None
        turns = [w.turn for w in windows]
        keys = {w.turn: cache_key(self.settings.model, PROMPT_VERSION, w.text()) for w in windows}
        results: _Result = {}
        if self._cache is not None and self.use_cache:
            for turn, value in self._from_cache(keys).items():
                results[turn] = value
        todo = [w for w in windows if w.turn not in results]
        futures = [
            self._pool.submit(self._run, build_request(group, task), turns)
            for group in pack(todo, self.settings.pack_tokens)
        ]
        fresh: _Result = {}
        for f in futures:
            try:
                fresh.update(f.result())
            except LLMError as e:  # only fatal ones get here: _run falls back on the others
                self._fatal = self._fatal or e
        # What was answered before a fatal error is paid for: cached, so the rerun after the
        # key is fixed does not ask for it again.
        self._to_cache(keys, fresh)
        if self._fatal is not None:
            raise self._fatal
        results.update(fresh)

        batch = ExtractionBatch()
        for w in windows:
            found = results.get(w.turn, "no reply")
            if isinstance(found, WindowExtraction):
                batch.extractions.append(found)
                continue
            self.stats.inc("llm_fallbacks")
            if found.startswith("error") or found == "no reply":
                # The server did not answer (not cached): a later run should ask again.
                batch.retry.append(w.turn)
            try:
                batch.extractions.append(self._fallback.extract(w))
            except Exception as e:
                batch.failures.append((w.turn, e))
        return batch

    def drain_stats(self) -> dict[str, int]:
        return self.stats.drain()

    # -- cache ------------------------------------------------------------------------------

    def _from_cache(self, keys: dict[int, str]) -> _Result:
        assert self._cache is not None
        hits = self._cache.get_many(keys.values())
        out: _Result = {}
        for turn, key in keys.items():
            value = hits.get(key)
            if not isinstance(value, dict):
                continue  # absent, or damaged: asked again, and the answer replaces it
            if "findings" in value:
                try:
                    out[turn] = WindowExtraction.model_validate(value["findings"])
                except ValidationError:
                    continue
            elif isinstance(value.get("fallback"), str):
                # The model's reply for this window was unusable: do not pay to hear it again.
                out[turn] = value["fallback"]
            else:
                continue  # an object of another shape is damage too, not a fallback
            self.stats.inc("llm_cache_hits")
        return out

    def _to_cache(self, keys: dict[int, str], fresh: _Result) -> None:
        if self._cache is None:
            return
        items: dict[str, Any] = {}
        for turn, value in fresh.items():
            if isinstance(value, WindowExtraction):
                items[keys[turn]] = {"findings": value.model_dump(mode="json")}
            elif value.startswith("invalid"):
                items[keys[turn]] = {"fallback": value}
            # Transport failures are not cached: the next run should try again.
        self._cache.put_many(items)

    # -- one request ------------------------------------------------------------------------

    def _run(self, request: Request, trajectory_turns: list[int]) -> _Result:
        if self._failed_in_a_row >= BREAKER_FAILURES:
            # The server is down: every request would wait out all its retries first. The
            # heuristic stands in (not cached), and the next run asks the LLM again.
            self.stats.inc("llm_skipped_server_down", len(request.turns))
            return {t: "error: the LLM server is down" for t in request.turns}
        try:
            result = self._run_checked(request, trajectory_turns)
        except LLMError as e:
            if e.fatal:
                raise
            self.stats.inc("llm_errors")
            if e.status is None or e.status == 429 or e.status >= 500:
                self._failed_in_a_row += 1
                if self._failed_in_a_row == BREAKER_FAILURES:
                    log.error(
                        "%d LLM requests in a row failed; the heuristic extracts the rest "
                        "of this run: %s",
                        BREAKER_FAILURES,
                        e,
                    )
            log.warning("LLM request for turns %s failed, heuristic used: %s", request.turns, e)
            return {t: f"error: {e}" for t in request.turns}
        self._failed_in_a_row = 0
        return result

    def _run_checked(self, request: Request, trajectory_turns: list[int]) -> _Result:
        assert self._client is not None
        try:
            sent = self._send(request)
        except LLMError as e:
            if e.status in (400, 413) and len(request.windows) > 1:
                return self._split(request, trajectory_turns)  # most likely too long
            raise
        reply = sent.reply
        if reply.finish_reason == "length" and len(request.windows) > 1:
            return self._split(request, trajectory_turns)  # the reply was cut off
        try:
            if reply.finish_reason == "length":
                parsed = self._salvage(request, reply)
            else:
                parsed = parse_reply(reply_text(reply))
        except LLMReplyError as first:
            if reply.finish_reason == "length":
                # Asking again would be cut off at the same length: the heuristic stands in.
                return {t: f"invalid: {first}" for t in request.turns}
            self.stats.inc("llm_repairs")
            repair = repair_messages(sent.messages, reply.content or "", str(first))
            again = self._client.complete(
                repair, sent.shape.response_format, extra_body=sent.shape.extra_body
            )
            self._account(repair, sent.shape.schema_sent, again)
            try:
                parsed = parse_reply(reply_text(again))
            except LLMReplyError as second:
                log.warning("reply for turns %s invalid after repair: %s", request.turns, second)
                return {t: f"invalid after repair: {second}" for t in request.turns}
        filtered = filter_reply(parsed, request.windows, trajectory_turns, self.label)
        self.stats.inc("llm_rejected_identifiers", filtered.rejected_identifiers)
        self.stats.inc("llm_rejected_refs", filtered.rejected_refs)
        if filtered.rejected:
            log.info("dropped from the LLM reply (not verbatim): %s", "; ".join(filtered.rejected))
        self.stats.inc("llm_windows", len(filtered.extractions))
        out: _Result = {t: "invalid: the reply has no item for this window" for t in request.turns}
        out.update(filtered.extractions)
        return out

    def _send(self, request: Request) -> StructuredReply:
        assert self._client is not None
        sent = self._client.complete_structured(
            messages(request), REPLY_SCHEMA_NAME, reply_json_schema()
        )
        self._account(sent.messages, sent.shape.schema_sent, sent.reply)
        self._mode = sent.shape.dialect
        return sent

    def _salvage(self, request: Request, reply: ChatReply) -> ExtractionReply:
        """A reply cut off at the output limit: its complete items, or LLMReplyError."""
        self.stats.inc("llm_truncated")
        value = salvage_truncated(reply.content or "", reply_json_schema())
        if value is None:
            self.stats.inc("llm_truncated_unusable")
            raise LLMReplyError("the reply was cut off at the output token limit")
        self.stats.inc("llm_truncated_repaired")
        log.info("reply for turns %s was cut off; kept its complete items", request.turns)
        return parse_reply(json.dumps(value))

    def _split(self, request: Request, trajectory_turns: list[int]) -> _Result:
        self.stats.inc("llm_splits")
        windows = [pw.window for pw in request.windows]
        half = len(windows) // 2
        out: _Result = {}
        for part in (windows[:half], windows[half:]):
            out.update(self._run(build_request(part, request.task), trajectory_turns))
        return out

    def _account(
        self, msgs: list[dict[str, str]], schema_sent: dict[str, Any] | None, reply: ChatReply
    ) -> None:
        local = prompt_tokens(msgs, schema_sent)
        self.stats.inc("llm_prompt_tokens_local", local)
        self.stats.inc("llm_prompt_tokens", reply.prompt_tokens if reply.prompt_tokens else local)
        completion = reply.completion_tokens
        if completion is None:
            completion = count_tokens(reply.content or "")
        self.stats.inc("llm_completion_tokens", completion)
        if reply.prompt_tokens is None:
            self.stats.inc("llm_usage_missing")

    @property
    def mode(self) -> str:
        return self._mode
