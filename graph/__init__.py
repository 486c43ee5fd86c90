"""The graph stage (docs/architecture.md)."""

from __future__ import annotations

from trajgraph._stages import refuse_bare_name

refuse_bare_name(__name__)  # loads only as trajgraph.graph (trajgraph/_stages.py)
