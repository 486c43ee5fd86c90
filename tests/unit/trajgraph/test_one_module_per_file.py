"""Each file loads as one module: the stage folders (graph/, pipelines/, ...) sit at the top of
the repository and are linked into trajgraph/, and with the repository root on ``sys.path``
(pytest's ``pythonpath``, a script run from the root) they must still load only as
``trajgraph.<stage>`` (trajgraph/core/stages.py)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from tests.paths import REPO
from trajgraph.core.stages import STAGES

# Imports every module of the installed package (but the ``__main__`` entry points) with the
# repository root on sys.path (as pytest and the benches run), then lists what loaded under a
# bare stage name and what failed to import.
_IMPORT_ALL = """
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import trajgraph
names, failed = [], {}
for info in pkgutil.walk_packages(trajgraph.__path__, "trajgraph."):
    if info.name.endswith(".__main__"):
        continue  # `python -m` entry points run their command when imported
    names.append(info.name)
    try:
        importlib.import_module(info.name)
    except Exception as e:
        failed[info.name] = f"{type(e).__name__}: {e}"
stages = set(sys.argv[2].split(","))
bare = sorted(m for m in sys.modules if m.split(".")[0] in stages)
print(json.dumps({"names": names, "failed": failed, "bare": bare}))
"""


def test_every_module_loads_once_under_its_trajgraph_name() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, str(REPO), ",".join(STAGES)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found = json.loads(out.stdout.splitlines()[-1])
    assert found["failed"] == {}
    assert found["bare"] == []
    # The walk reached every stage through its link in trajgraph/.
    assert {f"trajgraph.{s}" for s in STAGES} <= set(found["names"])
    assert len(found["names"]) > 100


def test_no_bare_stage_module_in_this_process() -> None:
    assert [m for m in sys.modules if m.split(".")[0] in STAGES] == []


@pytest.mark.parametrize("stage", STAGES)
def test_a_bare_stage_import_fails_with_what_to_import(stage: str) -> None:
    assert any(p in (".", "", str(REPO)) for p in sys.path)  # the bare name is reachable
    with pytest.raises(ImportError, match=rf"import trajgraph\.{stage}\b"):
        importlib.import_module(stage)
    assert stage not in sys.modules
    with pytest.raises(ImportError, match=rf"import trajgraph\.{stage}\b"):
        importlib.import_module(f"{stage}.nothing_here")


def test_a_bare_import_from_the_repository_root_fails_in_a_fresh_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import graph.node_ids"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1
    assert "ImportError: 'graph' is a folder of trajgraph: import trajgraph.graph" in out.stderr
