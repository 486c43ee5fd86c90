"""The graph stage (docs/architecture.md)."""

from __future__ import annotations

from trajgraph.core.stages import refuse_bare_name

refuse_bare_name(__name__)  # loads only as trajgraph.graph (trajgraph/core/stages.py)
