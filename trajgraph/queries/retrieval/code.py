"""Code over turns: Python over one trajectory's turns in the sandbox (queries/sandbox/), the
caller's or one the rules (or the LLM) wrote; its result and the turns it cites are evidence.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trajgraph.core.errors import ConfigError
from trajgraph.queries.retrieval import cypher, router
from trajgraph.queries.retrieval.base import MAX_K, Evidence, add

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.retriever import Run


def run_code(
    run: Run,
    question: str,
    route: router.Route,
    scope: dict[str, Any],
    found: dict[str, Evidence],
    code: str | None,
) -> dict[str, Any]:
    if not scope["tuid"]:
        raise ConfigError("code over turns needs a trajectory (--trajectory)")
    program: str | None = code or route.code
    if not program and (not route.aggregates or router.is_count(question)):
        program = router.offline_code(question, route.identifiers)
    if not program:
        if route.aggregates:  # the offline tables answer it (see go)
            return {}
        return {"code_error": "no program: pass code, or configure an LLM to write it"}
    from trajgraph.queries.sandbox import run_python

    turns = run.read(cypher.TRAJECTORY_TURNS, tuid=scope["tuid"])
    by_idx = {t["idx"]: t["uid"] for t in turns}
    result = run_python(program, [{k: v for k, v in t.items() if k != "uid"} for t in turns])
    counts: dict[str, Any] = {"code": program, "code_seconds": round(result.seconds, 3)}
    if result.error:
        counts["code_error"] = result.error
        return counts
    counts["code_result"] = result.value
    found[f"code:{len(found)}"] = Evidence(
        uid="code",
        kind="code",
        trajectory_id=scope["trajectory"] or "",
        turn=None,
        text=f"code result: {json.dumps(result.value, default=str)[:2000]}",
        why=f"code over {len(turns)} turns (touched {len(result.touched_turns)})",
        score=1.0,
        source="code",
    )
    # Evidence turns: those the result names ({"turns": [...]}) when it names any, else
    # those the code read, unless it read them all (a scan cites nothing in particular).
    named = result.value.get("turns") if isinstance(result.value, dict) else None
    if isinstance(named, list) and all(isinstance(i, int) for i in named):
        cited, why = named, "named in the code's result"
    elif len(result.touched_turns) < len(turns):
        cited, why = result.touched_turns, "read by the code"
    else:
        cited, why = [], ""
    for idx in cited[:MAX_K]:
        if idx in by_idx:
            add(found, by_idx[idx], "code", why, 0.9)
    return counts
