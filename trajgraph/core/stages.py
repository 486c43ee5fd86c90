"""The stage folders (pipelines/, extractors/, schemas/, graph/, queries/) load only as
``trajgraph.<stage>``.

They sit at the top of the repository and are linked into trajgraph/ (one copy of the code).
With the repository root on ``sys.path`` (pytest's ``pythonpath``, a script run from the
root) they were importable under their bare names too, and one file then loaded as two
modules: two copies of every module-level cache and class, an ``isinstance`` across them
False. Each stage's ``__init__`` calls ``refuse_bare_name(__name__)`` first, so the bare
import fails at once, in any process, with what to import instead.
"""

from __future__ import annotations

STAGES = ("pipelines", "extractors", "schemas", "graph", "queries")


def refuse_bare_name(name: str) -> None:
    """Raise ImportError unless ``name`` (a stage package's ``__name__``) is trajgraph's."""
    if not name.startswith("trajgraph."):
        raise ImportError(
            f"{name!r} is a folder of trajgraph: import trajgraph.{name} (under its bare name "
            "every file would load a second time, as another module)",
            name=name,
        )
