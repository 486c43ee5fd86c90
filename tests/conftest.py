"""Shared fixtures: the real, MIT-licensed agent logs (tests/paths.py says where; never copied
into the repo), the hypothesis profiles and the local OpenAI-compatible server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.fake_openai import FakeOpenAI
from tests.paths import AGENT_SESSIONS, DJANGO_CORPUS, SHARED

# Property-based and fuzz tests: in CI a fixed seed (derandomize) and a bounded budget, so a
# run takes the same inputs and the same time every time; HYPOTHESIS_PROFILE=deep explores
# with a random seed and many more inputs (`long`: fewer) and keeps failures in .hypothesis/.
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, deadline=None)
settings.register_profile("long", max_examples=300, deadline=None)
settings.register_profile("deep", max_examples=1500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(
            f"real trajectories not found at {SHARED} (see ../shared/trajectories/README.md)"
        )
    return SHARED


@pytest.fixture(scope="session")
def django_corpus() -> Path:
    """80 real mini-swe-agent runs on Django issues (cross-run lessons); never copied."""
    if not DJANGO_CORPUS.is_dir():
        pytest.skip(f"the Django corpus is not at {DJANGO_CORPUS} (see ../shared/corpora/)")
    return DJANGO_CORPUS


@pytest.fixture(scope="session")
def agent_sessions() -> Path:
    if not AGENT_SESSIONS.is_dir():
        pytest.skip(f"the agent sessions are not at {AGENT_SESSIONS} (see ../shared/corpora/)")
    return AGENT_SESSIONS


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    """A local OpenAI-compatible server (real HTTP) with scriptable faults; see fake_openai."""
    from trajgraph.extractors.structured import NEGOTIATOR

    NEGOTIATOR.forget()  # a later test's server may get this one's port
    with FakeOpenAI() as server:
        yield server
    NEGOTIATOR.forget()
