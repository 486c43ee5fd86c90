"""The wheel installs one top-level name, `trajgraph`, with its package data and py.typed."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

STAGES = ("pipelines", "extractors", "schemas", "graph", "queries")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # Build from a copy, so the checkout gets no build/ or egg-info; links stay links, as in git.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "trajgraph", *STAGES):
        path = REPO / name
        if path.is_dir():
            shutil.copytree(
                path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    proc = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("trajgraph-*.whl")
    return zipfile.ZipFile(built)


def _payload(wheel: zipfile.ZipFile) -> list[str]:
    return [n for n in wheel.namelist() if ".dist-info/" not in n]


def test_the_only_top_level_name_is_trajgraph(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/", 1)[0] for n in _payload(wheel)}
    assert tops == {"trajgraph"}
    top_level = next(n for n in wheel.namelist() if n.endswith(".dist-info/top_level.txt"))
    assert wheel.read(top_level).decode().split() == ["trajgraph"]


def test_stages_install_under_trajgraph_with_their_data(wheel: zipfile.ZipFile) -> None:
    names = set(_payload(wheel))
    assert "trajgraph/py.typed" in names
    for stage in STAGES:
        assert f"trajgraph/{stage}/__init__.py" in names, stage
    assert "trajgraph/schemas/trajectory.schema.json" in names
    cypher = {n for n in names if n.startswith("trajgraph/queries/") and n.endswith(".cypher")}
    assert len(cypher) == len(list((REPO / "queries").glob("*.cypher"))) > 0
    assert "trajgraph/pipelines/adapters/__init__.py" in names
    # Every package folder of the source tree is in the wheel (a missing __init__.py drops one).
    for folder, _, files in os.walk(REPO / "trajgraph", followlinks=True):
        if "__pycache__" not in folder and any(f.endswith(".py") for f in files):
            init = Path(folder, "__init__.py").relative_to(REPO).as_posix()
            assert init in names, f"{folder} is no package (no __init__.py): not in the wheel"
    assert "trajgraph/evaluation/harness.py" in names  # `trajgraph eval` needs it installed
    assert not any(n.startswith(("trajgraph/bench", "bench/", "tests/")) for n in names)


def test_installed_code_imports_only_installed_names(wheel: zipfile.ZipFile) -> None:
    """Nothing in the wheel imports tests/, bench/ or a stage folder by its top-level name."""
    banned = {"tests", "bench", *STAGES}
    offenders = []
    for name in _payload(wheel):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(wheel.read(name), filename=name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            offenders += [f"{name}:{node.lineno} imports {r}" for r in roots if r in banned]
    assert not offenders, offenders


def test_the_mcp_requirement_has_the_server_api_we_import() -> None:
    # trajgraph/mcp_server.py imports mcp.server.mcpserver.MCPServer, which mcp 2.0 brought
    # (1.x named it FastMCP): a requirement that lets pip keep mcp 1.x breaks `trajgraph mcp`.
    from packaging.requirements import Requirement

    assert "from mcp.server.mcpserver import" in (REPO / "trajgraph/mcp_server.py").read_text()
    text = (REPO / "pyproject.toml").read_text("utf-8")
    (line,) = re.findall(r'^\s*"(mcp[<>=!~ ][^"]*)"', text, flags=re.MULTILINE)
    spec = Requirement(line).specifier
    assert not spec.contains("1.99"), f"pyproject.toml allows mcp 1.x: {line!r}"
    assert spec.contains("2.0.0")
