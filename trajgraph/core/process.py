"""Local processes trajgraph starts (the Neo4j server with its Browser, the LLM server, the hook
server), seen from outside: pid files, whether a pid is alive and ours, whether a port answers,
launching detached, waiting until ready or dead, stopping, and the tail of a log to show when
one dies.

``LocalProcess`` is the one manager: a server is described once (its pid file, the arguments
that prove a pid is ours, its readiness probe, its logs) and started, inspected and stopped
the same way. Nothing here keeps state in memory between calls: the pid file and the process
table are the truth, so any process (CLI, tests, dev.sh) sees the same server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import file_lock, last_lines

LOOPBACK = "127.0.0.1"  # every server trajgraph starts listens here only


def read_pid(pid_file: Path) -> int | None:
    """The positive pid the file holds, else None: kill(0) and kill(-N) signal process groups,
    so a pid file holding one must never be obeyed."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def alive(pid: int) -> bool:
    if pid <= 0:  # kill(0, ...) and kill(-N, ...) would answer for a whole process group
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        # If we are its parent (tests start and stop in one process), reap it: a zombie
        # still answers kill(0).
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def port_open(port: int, timeout: float = 1.0, host: str = LOOPBACK) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def launch(cmd: list[str], *, cwd: Path, log_path: Path, pid_file: Path) -> int:
    """Start cmd fully detached, its output appended to ``log_path``; write and return its pid.

    A new session keeps the server alive past this process and a Ctrl-C in the calling shell.
    A short-lived `sh` launches it in the background and exits, so the server is not our
    child: no zombie to reap and nothing to wait for (the CLI exits, tests keep running).
    """
    launcher = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
    try:
        out = subprocess.run(
            ["/bin/sh", "-c", launcher, "sh", str(log_path), *cmd],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,
            timeout=30,
            check=True,
        )
        pid = int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        raise ServerError(f"cannot launch {cmd[0]}: {e}") from e
    pid_file.write_text(f"{pid}\n")
    return pid


def wait_dead(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail(path: Path, n: int, offset: int = 0) -> str:
    """Last n lines of a file written after offset (logs append across runs)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset if offset <= size(path) else 0)
            return last_lines(f.read().decode("utf-8", "replace"), n)
    except OSError:
        return ""


def command_line(pid: int) -> list[str] | None:
    """The arguments of a live process, None when they cannot be read.

    /proc where there is one; elsewhere (macOS) `ps`, whose single line is split on spaces:
    good enough to find our markers, never a reason to trust a pid file blindly.
    """
    if pid <= 0:
        return None
    if Path("/proc/self").is_dir():
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a] or None
    try:
        out = subprocess.run(
            ["ps", "-ww", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split() or None


@dataclass(frozen=True)
class LocalProcess:
    """One server trajgraph runs detached from a run dir, described once.

    A pid counts as ours only when it is positive, alive and its command line holds every one
    of ``markers`` (guards against pid reuse and against a pid file someone else wrote): a pid
    file naming anything else is stale, removed and never signalled.
    """

    name: str  # in messages, as a sentence starts: "Neo4j", "the local LLM"
    run_dir: Path  # holds the pid file and the start/stop lock
    pid_file: Path
    markers: tuple[str, ...]  # arguments that all appear on our server's command line
    ready: Callable[[], bool]  # one short readiness probe (Bolt handshake, GET /v1/models)
    not_ready: str  # what it failed to do by the deadline: "open Bolt on port 7687"
    stop_command: str  # how a user stops it: "trajgraph neo4j stop"
    start_timeout_s: float
    logs: tuple[Path, ...]  # tailed in this order when it fails; the first receives its output
    tail_lines: int = 40
    log_note: str = ""  # a last line after the tails: where more detail is
    state_files: tuple[Path, ...] = ()  # describe the running server; go with the pid file

    def owns(self, pid: int) -> bool:
        if pid <= 0 or not alive(pid):
            return False
        args = command_line(pid)
        return args is not None and all(m in args for m in self.markers)

    def pid(self) -> int | None:
        """Our running server's pid, or None (no pid file, a stale one, or not ours)."""
        pid = read_pid(self.pid_file)
        return pid if pid is not None and self.owns(pid) else None

    def current(self) -> int | None:
        """Under ``lock``: our running server's pid; else None, its stale files removed."""
        pid = self.pid()
        if pid is None:
            self.forget()
        return pid

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Start and stop from several processes at once queue here."""
        with file_lock(self.run_dir / ".lock"):
            yield

    def forget(self) -> None:
        """Remove the pid file and the state files: their process is gone or not ours."""
        for path in (self.pid_file, *self.state_files):
            path.unlink(missing_ok=True)

    def log_marks(self) -> tuple[int, ...]:
        """Where each log ends now: a failure shows only what this start wrote."""
        return tuple(size(path) for path in self.logs)

    def launch(self, cmd: list[str]) -> int:
        """Start cmd detached (see ``launch``), its output in the first log; return its pid."""
        return launch(cmd, cwd=self.run_dir, log_path=self.logs[0], pid_file=self.pid_file)

    def wait_ready(
        self, pid: int, *, deadline: float, marks: tuple[int, ...] | None = None
    ) -> None:
        """Return once ``ready`` answers; ServerError when the process dies first (its pid
        file removed) or at the deadline (left running), with the log tails either way."""
        while not self.ready():
            if not alive(pid):
                self.pid_file.unlink(missing_ok=True)
                raise ServerError(
                    f"{self.name} exited during start-up.\n{self.failure_logs(marks)}"
                )
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{self.name} (pid {pid}) did not {self.not_ready} within "
                    f"{self.start_timeout_s:.0f} s; it is left running (stop it with "
                    f"`{self.stop_command}`).\n{self.failure_logs(marks)}"
                )
            time.sleep(0.25)

    def start(self, cmd: list[str], *, deadline: float | None = None) -> int:
        """Launch cmd and wait until it is ready (see ``wait_ready``); return its pid. The
        caller holds ``lock`` and ``current`` found no server of ours."""
        if deadline is None:
            deadline = time.monotonic() + self.start_timeout_s
        marks = self.log_marks()
        pid = self.launch(cmd)
        self.wait_ready(pid, deadline=deadline, marks=marks)
        return pid

    def stop(self, *, timeout: float) -> bool:
        """SIGTERM our server, SIGKILL it after ``timeout``; True if one was running. Only a
        pid that ``owns`` accepts is ever signalled; a stale pid file is removed."""
        if not self.run_dir.is_dir():
            return False
        with self.lock():
            pid = self.current()
            if pid is None:
                return False
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 15.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                if wait_dead(pid, wait):
                    self.forget()
                    return True
            raise ServerError(f"{self.name} (pid {pid}) did not exit even after SIGKILL")

    def failure_logs(self, marks: tuple[int, ...] | None = None) -> str:
        """The lines each log gained since ``marks`` (all of it without), then the note."""
        parts = []
        for i, path in enumerate(self.logs):
            text = tail(path, self.tail_lines, marks[i] if marks else 0)
            if text:
                parts.append(f"--- last lines of {path} ---\n{text}")
        if self.log_note:
            parts.append(self.log_note)
        return "\n".join(parts) or f"(nothing in {', '.join(map(str, self.logs))})"
