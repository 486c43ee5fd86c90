"""Code over turns: Python over one trajectory's turns in the sandbox (queries/sandbox/), the
caller's or one the rules (or the LLM) wrote; its result and the turns it cites are evidence.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from trajgraph.core.errors import ConfigError
from trajgraph.queries.retrieval import cypher, router
from trajgraph.queries.retrieval.base import MAX_K, Evidence, Found
from trajgraph.queries.retrieval.strategy import Strategy

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.run import Run


class PythonCode(Strategy):
    name = "code"

    def find(self, run: Run, route: router.Route) -> Found:
        if not run.tuid:
            raise ConfigError("code over turns needs a trajectory (--trajectory)")
        question = run.ask.question
        program: str | None = run.ask.code or route.code
        if not program and (not route.aggregates or router.is_count(question)):
            program = router.offline_code(question, route.identifiers)
        if not program:
            if route.aggregates:  # the offline tables answer it (retriever.py)
                return Found()
            return Found(
                counts={"code_error": "no program: pass code, or configure an LLM to write it"}
            )
        from trajgraph.queries.sandbox import run_python

        turns = run.read(cypher.TRAJECTORY_TURNS, tuid=run.tuid)
        by_idx = {t["idx"]: t["uid"] for t in turns}
        result = run_python(program, [{k: v for k, v in t.items() if k != "uid"} for t in turns])
        found = Found(counts={"code": program, "code_seconds": round(result.seconds, 3)})
        if result.error:
            found.counts["code_error"] = result.error
            return found
        found.counts["code_result"] = result.value
        found.evidence.append(
            Evidence(
                uid="code",
                kind="code",
                trajectory_id=run.ask.trajectory or "",
                turn=None,
                text=f"code result: {json.dumps(result.value, default=str)[:2000]}",
                why=f"code over {len(turns)} turns (touched {len(result.touched_turns)})",
                score=1.0,
                source="code",
            )
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
                found.hit(by_idx[idx], "code", why, 0.9)
        return found
