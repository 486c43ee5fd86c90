"""Where things are, for every test wherever it sits in tests/: the repository, the real data
beside it in ../shared (read-only, never copied into the repo) and the artifacts folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "tests" / "artifacts"  # what tests leave for people to look at (.gitignore)

# ../shared beside the checkout (TRAJGRAPH_SHARED_ROOT elsewhere, e.g. a git worktree).
SHARED_ROOT = Path(os.environ.get("TRAJGRAPH_SHARED_ROOT", REPO.parent / "shared"))
# The real trajectories of ../shared/trajectories (TRAJGRAPH_SHARED_TRAJECTORIES elsewhere).
SHARED = Path(os.environ.get("TRAJGRAPH_SHARED_TRAJECTORIES", SHARED_ROOT / "trajectories"))
CORPORA = SHARED_ROOT / "corpora"
DJANGO_CORPUS = CORPORA / "swebench-django-mini-swe-agent"
AGENT_SESSIONS = CORPORA / "agent-sessions"
CODEX_SESSIONS = CORPORA / "codex-sessions"
AMA_DEV = SHARED_ROOT / "ama-dev"
