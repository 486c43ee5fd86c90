"""Shared fixtures: where the real, MIT-licensed agent logs live (never copied into the repo)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI

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
