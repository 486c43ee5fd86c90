"""Beam's Python ``boot`` program: what a TaskManager or Spark executor runs to start a
Python SDK worker (``--environment_type=PROCESS``).

It is the entrypoint of Beam's Python SDK container, a Go program: it fetches the job's
staged artifacts, installs what was staged (nothing, for trajgraph: the workers' venv has it
all) and runs ``python -m apache_beam.runners.worker.sdk_worker_main`` with the ``python``
found on PATH. The clusters put ``.venv-cluster/bin`` first on their members' PATH and set
``RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1``, so boot uses that venv as it is instead of
creating a venv per worker under ``/opt/apache/beam-venv``.

Built once per Beam version with Go from the module proxy, as Prism is
(``pipelines/prism.py``), into ``<cache>/beam-boot/<beam version>/boot``; one build at a time
(a lock), and the binary appears under its name only when complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from trajgraph.core.errors import RunnerError
from trajgraph.core.jvm import Log, file_lock, last_lines
from trajgraph.core.settings import Settings
from trajgraph.pipelines.engines.layout import cache_root
from trajgraph.pipelines.engines.versions import BEAM

PACKAGE = "github.com/apache/beam/sdks/v2/python/container"
BUILD_TIMEOUT_S = 1800.0


def boot_dir(settings: Settings, version: str = BEAM) -> Path:
    return cache_root(settings) / "beam-boot" / version


def boot_path(settings: Settings, version: str = BEAM) -> Path:
    return boot_dir(settings, version) / "boot"


def build_command(settings: Settings, version: str = BEAM) -> str:
    return (
        f"GOFLAGS=-mod=mod GOBIN=DIR go install {PACKAGE}@v{version}, then move DIR/container "
        f"to {boot_path(settings, version)}"
    )


def built(settings: Settings, version: str = BEAM) -> Path | None:
    path = boot_path(settings, version)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def ensure_boot(settings: Settings, *, log: Log = print, version: str = BEAM) -> Path:
    """The boot program for ``version``, built with ``go install`` on first use only."""
    found = built(settings, version)
    if found is not None:
        return found
    go = shutil.which("go")
    if go is None:
        raise RunnerError(
            f"Beam's Python boot program is not built ({boot_path(settings, version)}) and Go "
            "is not installed (no `go` on PATH): install Go, or build it elsewhere with "
            f"{build_command(settings, version)}"
        )
    target = boot_path(settings, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / ".lock"):
        if built(settings, version) is not None:
            return target
        log(f"Building Beam's Python boot program {PACKAGE}@v{version} with Go (once)")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            out = _go_install(go, version, Path(tmp))
            made = Path(tmp) / "container"
            if out.returncode != 0 or not made.is_file():
                (target.parent / "build.log").write_text(out.stdout + out.stderr)
                raise RunnerError(
                    f"cannot build Beam's Python boot program ({PACKAGE}@v{version}): go "
                    f"exit {out.returncode}; needs Go and the Go module proxy "
                    f"({target.parent / 'build.log'}):\n{last_lines(out.stderr, 5)}"
                )
            made.replace(target)
        log(f"Built {target} in {time.monotonic() - started:.0f} s")
    return target


def _go_install(go: str, version: str, gobin: Path) -> subprocess.CompletedProcess[str]:
    # -mod=mod: resolve the module's own go.mod, not a workspace's.
    env = {**os.environ, "GOBIN": str(gobin), "GOFLAGS": "-mod=mod"}
    try:
        return subprocess.run(
            [go, "install", f"{PACKAGE}@v{version}"],
            cwd=gobin,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise RunnerError(
            f"go install {PACKAGE} did not finish within {BUILD_TIMEOUT_S:.0f} s"
        ) from e
    except OSError as e:
        raise RunnerError(f"cannot run {go}: {e}") from e
