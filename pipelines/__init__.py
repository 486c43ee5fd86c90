"""The pipelines stage (docs/architecture.md)."""

from __future__ import annotations

from trajgraph._stages import refuse_bare_name

refuse_bare_name(__name__)  # loads only as trajgraph.pipelines (trajgraph/_stages.py)
