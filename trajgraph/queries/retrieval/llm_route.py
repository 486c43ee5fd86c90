"""The LLM's sufficiency decision for ``auto`` retrieval, validated against its contract.

Any failure (transport, invalid JSON, schema) falls back to the rule router: retrieval must
answer even when the model does not.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from trajgraph.core.errors import LLMError, one_line
from trajgraph.extractors.llm_client import reply_text, structured
from trajgraph.queries.retrieval import router
from trajgraph.schemas.extraction import strict_json_schema

log = logging.getLogger(__name__)
SEED_CHARS = 300
MAX_SEEDS = 8


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return strict_json_schema(router.RouteDecision)


def ask_router(
    client: Any, question: str, seeds: Sequence[Any], has_trajectory: bool
) -> router.Route:
    lines = [f"[{e.kind} turn {e.turn}] {e.text[:SEED_CHARS]}" for e in list(seeds)[:MAX_SEEDS]]
    user = (
        f"Question: {question}\n"
        + ("The question is about one trajectory.\n" if has_trajectory else "")
        + "Evidence found by similarity:\n<<<DATA>>>\n"
        + "\n".join(lines)
        + "\n<<<END DATA>>>"
    )
    messages = [
        {"role": "system", "content": router.ROUTER_SYSTEM},
        {"role": "user", "content": user},
    ]
    try:
        content = reply_text(
            client.complete_structured(messages, "trajgraph_route", _schema()).reply
        )
        decision = structured(content, router.RouteDecision, _schema())
    except LLMError as e:  # the server failed, or its reply is unusable (LLMReplyError)
        log.warning("LLM router failed (%s); using the rule router", one_line(e))
        fallback = router.rule_route(question, has_trajectory=has_trajectory)
        return router.Route(
            fallback.tools,
            fallback.directions,
            fallback.identifiers,
            f"rules (LLM router failed): {fallback.reason}",
        )
    return router.decision_route(decision, question)
