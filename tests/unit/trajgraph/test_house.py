"""The house of issue 41, checked on the code itself: imports only go down the floors of
pyproject.toml's [tool.importlinter] (lint-imports, as CI runs it), no production function is
over 100 lines, and no installed file hides behind a link."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "trajgraph"
MAX_FUNCTION_LINES = 100


def test_the_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        found = shutil.which("lint-imports")
        if found is None:
            pytest.skip("lint-imports is not installed (the dev lock has it)")
        lint = Path(found)
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_production_function_is_over_100_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines})")
    assert not long, "split these: " + ", ".join(long)


def test_every_installed_file_is_a_real_file_under_trajgraph() -> None:
    # The stage folders at the top are links into trajgraph/, never the other way round: a
    # tool that reads imports as text resolves `trajgraph.graph.x` to a real file.
    for path in PACKAGE.rglob("*"):
        assert not path.is_symlink(), f"{path.relative_to(REPO)} is a link"
    for stage in ("pipelines", "extractors", "schemas", "graph", "queries"):
        top = REPO / stage
        assert top.is_symlink() and top.resolve() == PACKAGE / stage, stage
