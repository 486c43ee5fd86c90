"""extractors.local_llm's server as a LocalProcess, without llama-cpp: `trajgraph llm stop`
signals only our server on our port (issue 44: a pid file holding -PGID killed a process
group), and a stale pid file and server.json are removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajgraph.core.settings import LocalLLMSettings
from trajgraph.extractors import local_llm


@pytest.fixture
def no_signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    sent: list[tuple[int, int]] = []
    real = os.kill

    def spy(pid: int, sig: int) -> None:
        if sig == 0:
            real(pid, sig)
        else:
            sent.append((pid, sig))  # recorded, never sent

    monkeypatch.setattr(os, "kill", spy)
    return sent


# Named, not computed, in the parameters: pytest-xdist workers must collect the same ids.
@pytest.mark.parametrize("pid", ["-1", "0", "our process group", "this process"])
def test_stop_never_signals_what_the_pid_file_names_unless_it_is_ours(
    tmp_path: Path, pid: str, no_signals: list[tuple[int, int]]
) -> None:
    pid = {"our process group": f"-{os.getpgrp()}", "this process": str(os.getpid())}.get(pid, pid)
    local = LocalLLMSettings(run_dir=tmp_path / "llm", port=8799)
    local.run_dir.mkdir()
    (local.run_dir / "server.pid").write_text(pid + "\n")
    (local.run_dir / "server.json").write_text('{"model": "x"}\n')
    assert local_llm.status(local).pid is None
    assert local_llm.stop(local, timeout=1.0) is False
    assert no_signals == []
    assert not (local.run_dir / "server.pid").exists()
    assert not (local.run_dir / "server.json").exists()


def test_the_server_module_on_another_port_is_not_ours(
    tmp_path: Path, no_signals: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look-alike: its command line names the server module, but another port."""
    local = LocalLLMSettings(run_dir=tmp_path / "llm", port=8799)
    local.run_dir.mkdir()
    code = "import time; time.sleep(60)"
    other = subprocess.Popen([sys.executable, "-c", code, local_llm.SERVER_MODULE, "8800"])
    try:
        (local.run_dir / "server.pid").write_text(f"{other.pid}\n")
        assert local_llm.stop(local, timeout=1.0) is False
        assert no_signals == [] and other.poll() is None
        mine = LocalLLMSettings(run_dir=local.run_dir, port=8800)
        (local.run_dir / "server.pid").write_text(f"{other.pid}\n")
        assert local_llm.status(mine).pid == other.pid, "the same process on its port is ours"
    finally:
        monkeypatch.undo()  # signals reach processes again
        other.kill()
        other.wait()
