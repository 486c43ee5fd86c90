"""Shared fixtures: where the real, MIT-licensed agent logs live (never copied into the repo)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.fake_openai import FakeOpenAI

# Property-based and fuzz tests: in CI a fixed seed (derandomize) and a bounded budget, so a
# run takes the same inputs and the same time every time; HYPOTHESIS_PROFILE=deep explores
# with a random seed and many more inputs (`long`: fewer) and keeps failures in .hypothesis/.
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, deadline=None)
settings.register_profile("long", max_examples=300, deadline=None)
settings.register_profile("deep", max_examples=1500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(
    os.environ.get("TRAJGRAPH_SHARED_TRAJECTORIES", REPO.parent / "shared" / "trajectories")
)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(
            f"real trajectories not found at {SHARED} (see ../shared/trajectories/README.md)"
        )
    return SHARED


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    """A local OpenAI-compatible server (real HTTP) with scriptable faults; see fake_openai."""
    with FakeOpenAI() as server:
        yield server
