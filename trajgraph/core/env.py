"""The few settings read before any other, by processes that must start fast (the hook client
runs on every tool call of the user's agent): no import beyond the standard library. The rest
of the settings are trajgraph/core/settings.py's, which reads these from here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DEFAULT_TENANT = "default"


def hook_dir_of(env: Mapping[str, str]) -> Path:
    """TRAJGRAPH_HOOK_DIR, else ~/.cache/trajgraph/hook."""
    raw = env.get("TRAJGRAPH_HOOK_DIR")
    return Path(raw) if raw else Path.home() / ".cache" / "trajgraph" / "hook"


def tenant_of(env: Mapping[str, str]) -> str:
    """TRAJGRAPH_TENANT, else the default tenant."""
    return env.get("TRAJGRAPH_TENANT") or DEFAULT_TENANT
