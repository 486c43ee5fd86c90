"""The wheel installs one top-level name, `trajgraph`, with its package data and py.typed."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

STAGES = ("pipelines", "extractors", "schemas", "graph", "queries")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tarfile.TarFile:
    """The sdist, built (without network) as `python -m build` does first."""
    # Build from a copy, so the checkout gets no build/ or egg-info; links stay links, as in git.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE", "trajgraph", *STAGES):
        path = REPO / name
        if path.is_dir():
            shutil.copytree(
                path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("sdist")
    build = f"from setuptools import build_meta as b; print(b.build_sdist({str(out)!r}))"
    proc = subprocess.run(
        [sys.executable, "-c", build], cwd=src, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("trajgraph-*.tar.gz")
    return tarfile.open(built)


@pytest.fixture(scope="module")
def wheel(sdist: tarfile.TarFile, tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel built from the unpacked sdist, as pip builds one from PyPI's sdist: what it
    holds is what the sdist carried, and what the checkout's wheel holds (the same files)."""
    unpacked = tmp_path_factory.mktemp("unpacked")
    sdist.extractall(unpacked)  # our own archive (filter= is not in every 3.10 and 3.11)
    (src,) = unpacked.iterdir()
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


def test_every_file_of_the_package_tree_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    # Code and data alike (schemas/*.json, queries/*.cypher, py.typed, __main__.py, ...): a
    # data file that package-data does not name is missing in every installed copy, though
    # the checkout (an editable install) finds it. The wheel is built from the sdist, so
    # this holds for the sdist too.
    names = set(_payload(wheel))
    tree = {
        Path(folder, f).relative_to(REPO).as_posix()
        for folder, dirs, files in os.walk(REPO / "trajgraph", followlinks=True)
        if "__pycache__" not in Path(folder).parts
        for f in files
        if not f.endswith((".pyc", ".pyo"))
    }
    missing = sorted(tree - names)
    assert not missing, f"not in the wheel (name them in [tool.setuptools.package-data]): {missing}"


def test_license_and_version_are_in_the_metadata(
    sdist: tarfile.TarFile, wheel: zipfile.ZipFile
) -> None:
    license_text = (REPO / "LICENSE").read_text("utf-8")
    assert license_text.startswith("MIT License")
    assert "the trajgraph contributors" in license_text
    (in_sdist,) = [m for m in sdist.getnames() if m.count("/") == 1 and m.endswith("/LICENSE")]
    assert sdist.extractfile(in_sdist).read().decode() == license_text  # type: ignore[union-attr]
    (in_wheel,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(in_wheel).decode() == license_text
    metadata_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = wheel.read(metadata_name).decode()
    assert "\nLicense-Expression: MIT\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata
    # One version: pyproject.toml's is the distribution's, which `trajgraph --version` prints.
    declared = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert declared, "pyproject.toml has no static version"
    assert f"\nVersion: {declared.group(1)}\n" in metadata
    assert "__version__ =" not in wheel.read("trajgraph/__init__.py").decode()


def test_the_oldest_python_is_the_one_everything_checks() -> None:
    # requires-python's floor is what mypy checks against (python_version), ruff's target and
    # what deploy/dev.sh demands: raising one without the others promises what no check sees.
    text = (REPO / "pyproject.toml").read_text("utf-8")
    (floor,) = re.findall(r'^requires-python = ">=3\.(\d+)"', text, flags=re.M)
    assert re.findall(r'^python_version = "3\.(\d+)"', text, flags=re.M) == [floor]
    assert re.findall(r'^target-version = "py3(\d+)"', text, flags=re.M) == [floor]
    dev = (REPO / "deploy" / "dev.sh").read_text("utf-8")
    assert f"sys.version_info < (3, {floor})" in dev
    assert f"python3 >= 3.{floor}" in dev


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
