"""A real language model in the loop: llama-cpp-python's OpenAI-compatible server on
SmolLM2-135M-Instruct (the embedded local LLM, `trajgraph llm start`), with the real Neo4j and the
real logs. A model this small is often wrong; what is tested is what trajgraph guarantees of
whatever it answers: the server's dialect is found without a refused request, every reply is
valid against the strict schema or replaced by the heuristic (counted), every stored identifier
is verbatim in its window, invented ones are rejected and counted, a re-ingest makes no call,
and the router and reminders answer or fall back to the rules.

Kept to a few windows: on 2 busy cores a window takes seconds to tens of seconds."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest
from trajgraph.core.settings import LLMSettings, Settings, local_llm_endpoint
from trajgraph.demo import DEMO_ID, sample_trajectory
from trajgraph.extractors import local_llm
from trajgraph.extractors.base import haystack, is_verbatim
from trajgraph.extractors.llm import LLMExtractor
from trajgraph.extractors.structured import NEGOTIATOR
from trajgraph.extractors.windows import build_windows


def _unavailable() -> str | None:
    """Why the real model cannot run here (the build's own reason when dev.sh recorded one)."""
    if importlib.util.find_spec("llama_cpp") is None:
        reasons = sorted(Path.home().glob(".cache/trajgraph/wheels/llama-cpp-python-*/UNAVAILABLE"))
        why = reasons[-1].read_text().strip() if reasons else "not installed"
        return f"llama-cpp-python is not available ({why}); `bash deploy/dev.sh llm` builds it"
    if importlib.util.find_spec("llama_cpp.server") is None:
        return "llama-cpp-python was installed without its [server] extra"
    try:
        local_llm.default_model()
    except Exception as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def real_llm(
    neo4j_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LLMSettings]:
    """The embedded server (the one dev.sh started, else one started here and stopped after)."""
    why = _unavailable()
    if why:
        pytest.skip(why)
    local = neo4j_settings.local_llm
    started = not local_llm.status(local).running
    local_llm.start(local, log=lambda m: print(m, file=sys.stderr))
    NEGOTIATOR.forget()
    cache = tmp_path_factory.mktemp("llm-cache") / "cache.sqlite3"
    yield local_llm_endpoint(LLMSettings(cache_path=cache, max_output_tokens=384), local)
    if started:
        local_llm.stop(local)


def _extract(llm: LLMSettings, traj: dict[str, Any], turns: int) -> tuple[Any, dict[str, int]]:
    ws = build_windows(traj, budget_tokens=700)[:turns]
    ex = LLMExtractor(llm, use_cache=False)
    try:
        batch = ex.extract_windows(ws, task=str(traj.get("task", "")))
        return batch, ex.drain_stats()
    finally:
        ex.close()


def _check_verbatim(batch: Any, traj: dict[str, Any]) -> None:
    ws = {w.turn: w for w in build_windows(traj, budget_tokens=700)}
    for e in batch.extractions:
        if not e.extractor.startswith("llm:"):
            continue  # the heuristic's findings (a fallback) have their own tests
        w = ws[e.turn]
        hay = haystack(w.prev_observation, w.action, w.observation)
        for o in e.objects:
            assert is_verbatim(o.name, hay), (e.turn, o.name)
        for s in e.states:
            assert is_verbatim(s.value, hay), (e.turn, s.value)


def test_the_real_model_extracts_the_demo_windows(real_llm: LLMSettings) -> None:
    traj = sample_trajectory()
    batch, stats = _extract(real_llm, traj, 2)
    assert [e.turn for e in batch.extractions] == [0, 1]  # never a window lost
    # The probe told llama-cpp-python apart: its dialect first, no request refused.
    assert stats["llm_probes"] == 1
    assert stats["llm_format_json_object_schema"] >= 1
    assert not stats.get("llm_format_fallbacks")
    assert stats["llm_calls"] >= 1 and stats["llm_completion_tokens"] > 0
    by_llm = sum(e.extractor.startswith("llm:") for e in batch.extractions)
    assert by_llm + stats.get("llm_fallbacks", 0) == 2
    assert by_llm == stats.get("llm_windows", 0)
    _check_verbatim(batch, traj)


def test_ingest_with_the_real_model_then_reingest_costs_nothing(
    real_llm: LLMSettings,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    driver: Any,
    tmp_path: Path,
) -> None:
    traj = sample_trajectory()
    traj["turns"] = traj["turns"][:3]  # three windows: the whole pipeline, in under a minute
    # A cache of its own: the other tests' windows must not be hits here.
    llm = dataclasses.replace(real_llm, cache_path=tmp_path / "cache.sqlite3")
    settings = dataclasses.replace(neo4j_settings, llm=llm)
    args = ("--extractor", "llm", "--embedder", "none")
    first = ingested(traj, tenant=tenant, args=args, settings=settings).summary
    assert first.balanced and first.ingested == 1 and first.dead_lettered == 0
    counts = first.llm
    assert counts["calls"] >= 1 and counts["format_json_object_schema"] >= 1
    assert counts.get("windows", 0) + counts.get("fallbacks", 0) == 3
    # Every object stored for the trajectory is verbatim in some turn of it.
    texts = haystack(*(f"{t['action']}\n{t['observation']}" for t in traj["turns"]))
    names = driver.execute_query(
        "MATCH (o:Object {tenant: $tenant}) RETURN o.name AS name", tenant=tenant
    ).records
    assert names and all(is_verbatim(r["name"], texts) for r in names)
    second = ingested(traj, tenant=tenant, args=args, settings=settings).summary
    assert second.balanced and second.llm.get("calls", 0) == 0  # nothing asked again
    assert DEMO_ID in {r["id"] for r in _trajectories(driver, tenant)}


def _trajectories(driver: Any, tenant: str) -> list[Any]:
    return driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) RETURN t.id AS id", tenant=tenant
    ).records


def test_the_router_and_reminders_answer_or_fall_back(
    real_llm: LLMSettings, neo4j_settings: Settings, ingested: Ingest
) -> None:
    run = ingested(sample_trajectory(), args=("--extractor", "heuristic"))
    # The router's reply is a few tokens; a reminder cut off at 128 is a fallback the test
    # accepts (384, the extraction tests' limit, cost a minute of a 2-core CI machine).
    llm = dataclasses.replace(real_llm, max_output_tokens=128)
    settings = dataclasses.replace(run.settings, llm=llm)
    from trajgraph.client import TrajGraph

    with TrajGraph.from_settings(settings) as tg:
        found = tg.retrieve("Why did the test fail at turn 1?", trajectory=DEMO_ID)
        assert found.route.startswith(("auto: LLM", "auto: rules (LLM router failed)"))
        assert found.tools and found.tools[0] == "embedding"
        r = tg.remind(DEMO_ID, "python -m pytest tests/test_calc.py -q", before_turn=2)
        assert r.source == "llm" or r.source.startswith("rules (")
        if r.reminder is not None and r.source == "llm":
            assert r.cites and all(0 <= c < 2 for c in r.cites)
    print(f"router: {found.route!r}; remind: {r.source!r} {r.reminder!r}")


def test_llm_cli_lifecycle_and_bad_models(tmp_path: Path, real_llm: LLMSettings) -> None:
    """`trajgraph llm` on a server of the test's own (port and run dir): start, status, stop;
    a model path that is not a GGUF file is a clear error before any server starts."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **_env(),
        "TRAJGRAPH_LLM_LOCAL_PORT": str(port),
        "TRAJGRAPH_LLM_LOCAL_RUN": str(tmp_path / "run"),
    }
    cli = [sys.executable, "-m", "trajgraph", "llm"]
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("not a model")
    bad = subprocess.run([*cli, "start", "--model", str(not_gguf)], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "not a GGUF file" in bad.stderr and "Traceback" not in bad.stderr
    assert (
        subprocess.run([*cli, "status"], env=env, capture_output=True, timeout=60).returncode == 3
    )
    try:
        up = subprocess.run([*cli, "start"], env=env, capture_output=True, text=True, timeout=240)
        assert up.returncode == 0, up.stderr
        assert f"127.0.0.1:{port}" in up.stdout
        state = json.loads((tmp_path / "run" / "server.json").read_text())
        assert state["model"] == "SmolLM2-135M-Instruct.Q4_1"
        st = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
        assert st.returncode == 0 and "running" in st.stdout
    finally:
        down = subprocess.run([*cli, "stop"], env=env, capture_output=True, text=True, timeout=90)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not (tmp_path / "run" / "server.json").exists()
    assert (
        subprocess.run([*cli, "status"], env=env, capture_output=True, timeout=60).returncode == 3
    )


def _status(cli: list[str], env: dict[str, str]) -> int:
    return subprocess.run([*cli, "status"], env=env, capture_output=True, timeout=60).returncode


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("TRAJGRAPH_LLM_LOCAL")}
