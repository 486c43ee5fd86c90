"""The modes as data (modes.py) and the strategies behind one interface (strategy.py)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path
from typing import Any

from trajgraph.queries.retrieval import strategies
from trajgraph.queries.retrieval.base import Evidence, Found
from trajgraph.queries.retrieval.modes import MODES, PLANS, VECTOR_MODES, Mode, Tool
from trajgraph.queries.retrieval.run import Ask, Run
from trajgraph.queries.retrieval.strategies.caller_cypher import CallerCypher
from trajgraph.queries.retrieval.strategies.code import PythonCode
from trajgraph.queries.retrieval.strategy import Strategy

RETRIEVAL = Path(strategies.__file__).resolve().parent.parent


def test_every_mode_has_one_plan_and_the_lists_derive_from_it() -> None:
    assert MODES == typing.get_args(Mode) == tuple(PLANS)
    assert VECTOR_MODES == ("auto", "embedding", "graph")
    assert [m for m, p in PLANS.items() if p.routed] == ["auto"]
    assert [m for m, p in PLANS.items() if p.runs_code] == ["auto", "code"]
    for plan in PLANS.values():
        assert plan.tools is None or set(plan.tools) <= set(typing.get_args(Tool))


def test_every_tool_has_strategies_behind_the_one_interface() -> None:
    assert set(strategies.TOOLBOX) == set(typing.get_args(Tool))
    for served in strategies.TOOLBOX.values():
        assert served and all(isinstance(s, Strategy) for s in served)
    assert isinstance(strategies.SIMILARITY, Strategy)
    assert isinstance(strategies.NAMED_STEPS, Strategy)


class _Engine:
    embedder: Any = None


def _run(code: str | None = None, cypher_query: str | None = None) -> Run:
    ask = Ask("q", "t", None, "code", 8, 3, 1000, code=code, cypher_query=cypher_query)
    return Run(_Engine(), session=None, ask=ask, vectors=False)  # type: ignore[arg-type]


def test_the_code_tool_runs_the_callers_cypher_when_given_else_python() -> None:
    def serving(run: Run) -> Strategy:
        return next(s for s in strategies.TOOLBOX["code"] if s.applies(run))

    assert isinstance(serving(_run(cypher_query="MATCH (n) RETURN n")), CallerCypher)
    assert isinstance(serving(_run(code="result = 1")), PythonCode)
    assert isinstance(serving(_run(cypher_query="")), PythonCode)


def test_a_run_merges_what_strategies_return_keeping_the_best_reason() -> None:
    run = _run()
    first, second = Found(), Found(counts={"keyword_hits": 1})
    first.hit("st_1", "keyword", "keyword hit", 0.4)
    second.hit("st_1", "seed", "seed (similarity 0.90)", 0.9)
    second.hit("tu_2", "hop", "hop 1 upstream", 0.5)
    second.evidence.append(Evidence("code", "code", "x", None, "code result: 3", "code", 1.0))
    assert run.take(first) == ["st_1"]
    assert run.take(second) == ["st_1", "tu_2", "code"]
    best = run.found["st_1"]
    assert (best.source, best.why, best.score) == ("seed", "seed (similarity 0.90)", 0.9)
    assert [e.kind for e in run.found.values()] == ["pending", "pending", "code"]
    assert run.counts == {"keyword_hits": 1}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }


def test_strategies_import_neither_the_retriever_nor_each_other() -> None:
    """The strategies depend on the interface and the run, never on what composes them
    (no import cycle), and the modes table imports nothing of the engine."""
    shared = [RETRIEVAL / "strategy.py", RETRIEVAL / "run.py", RETRIEVAL / "modes.py"]
    one_each = sorted(p for p in (RETRIEVAL / "strategies").glob("*.py") if p.stem != "__init__")
    assert len(one_each) >= 6
    for path in shared + one_each:
        imported = _imports(path)
        assert "trajgraph.queries.retrieval.retriever" not in imported, path
        assert not any(m.startswith(f"{strategies.__name__}") for m in imported), path
    assert not any(m.startswith("trajgraph") for m in _imports(RETRIEVAL / "modes.py"))
