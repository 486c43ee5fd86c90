"""The sandbox's parent side: run untrusted Python (from an LLM or an API caller) over one
trajectory's turns.

The code sees `turns` (read-only, read-tracking mappings), a small set of builtins and the
modules in ALLOWED_MODULES; it sets `result = ...` or ends with an expression. We get back
its JSON-compatible value and the idx of every turn whose fields it read.

Layers, each meant to stop an escape on its own:
1. RestrictedPython compile: no `_`-prefixed names or attributes, no exec/eval, attribute
   access, item access and writes go through guards.
2. Runtime guards in the child: curated builtins; `import` hands out *views* of allowlisted
   modules (public, non-module members only, so `statistics.sys` or `json.codecs.open` are
   unreachable); `getattr` refuses private/introspection names and module/frame/code values.
3. Child hardening: rlimits (CPU, address space, no new processes, files or descriptors),
   uid `nobody` when started as root, and an audit hook that, once the code runs, refuses
   every event except executing that code (open, import, socket, subprocess, os.*, ctypes,
   compile, exec, frame access, ...).
4. Parent: kills the child's process group at the wall-clock limit, caps what it reads,
   only ever json-decodes the reply and never evaluates the code itself.

A refusal by layers 2-3 is sticky: the run reports it as the error even if the code caught
the exception, so an escape attempt never looks like a success.

Result values that are not JSON (sets, tuples, Counter, datetime, ...) are converted:
containers become lists/objects, dates their ISO string, non-finite floats and anything else
a repr truncated to REPR_CHARS.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import RestrictedPython

from trajgraph.core.errors import BusyError
from trajgraph.queries.sandbox import child
from trajgraph.queries.sandbox.child import SandboxLimits, compile_code

DEFAULT_LIMITS = SandboxLimits()
# Children alive at once in this process, and how long a run waits for a free one before
# BusyError: each child may use a CPU and memory_mb of memory, so concurrent requests (30
# `while True: pass`, 8 strings of 200 MB) must queue instead of each starting one.
MAX_CONCURRENT_RUNS = max(2, os.cpu_count() or 2)
QUEUE_TIMEOUT_S = 10.0
_runs = threading.BoundedSemaphore(MAX_CONCURRENT_RUNS)
# The one file the child loads (it imports nothing of trajgraph).
CHILD_FILE = str(Path(child.__file__).resolve())
_STDERR_CAP = 64 * 1024
_REPLY_OVERHEAD = 64 * 1024
_POLL_SECONDS = 0.005


@dataclass(frozen=True)
class SandboxResult:
    value: Any
    touched_turns: list[int]
    error: str | None
    seconds: float


def run_python(
    code: str,
    turns: list[dict[str, Any]],
    *,
    limits: SandboxLimits = DEFAULT_LIMITS,
    queue_timeout_s: float = QUEUE_TIMEOUT_S,
) -> SandboxResult:
    """Run `code` over `turns` in a hardened child process; bad code never raises, it sets
    error. At most MAX_CONCURRENT_RUNS children run at once; a run that waited
    ``queue_timeout_s`` for one raises BusyError."""
    started = time.monotonic()
    if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
        raise TypeError("turns must be a list of dicts")
    _, error = compile_code(code)
    if error is not None:
        return SandboxResult(None, [], error, time.monotonic() - started)
    payload = json.dumps(
        {"code": code, "turns": turns, "limits": asdict(limits)}, default=str
    ).encode()
    if not _runs.acquire(timeout=queue_timeout_s):
        raise BusyError(
            f"the code sandbox is busy ({MAX_CONCURRENT_RUNS} runs in progress for "
            f"{queue_timeout_s:g}s); retry shortly"
        )
    try:
        value, touched, error = _run_child(payload, limits, reply_cap=_reply_cap(limits, turns))
    finally:
        _runs.release()
    return SandboxResult(value, touched, error, time.monotonic() - started)


def _reply_cap(limits: SandboxLimits, turns: list[dict[str, Any]]) -> int:
    # The reply also carries the touched idx list and the error text.
    return limits.max_output_bytes + _REPLY_OVERHEAD + 24 * len(turns)


@dataclass
class _Exchange:
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    overflow: bool = False


def _run_child(
    payload: bytes, limits: SandboxLimits, *, reply_cap: int
) -> tuple[Any, list[int], str | None]:
    with tempfile.TemporaryDirectory(prefix="trajgraph-sandbox-") as workdir:
        proc = _spawn(workdir)
        deadline = time.monotonic() + limits.wall_seconds
        feeder = threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True)
        feeder.start()
        try:
            exchange = _exchange(proc, deadline, reply_cap)
            if not (exchange.overflow or exchange.timed_out):
                exchange.timed_out = not _await_exit(proc.pid, deadline)
        finally:
            _kill_group(proc.pid)  # before reaping, so the group id cannot have been reused
            proc.wait()
            feeder.join(timeout=1)
            _close(proc.stdout, proc.stderr)
    return _verdict(exchange, proc.returncode, limits)


def _spawn(workdir: str) -> subprocess.Popen[bytes]:
    # -I: no environment variables or user site; -S: no site-packages .pth code; -B: no .pyc
    # writes. The child finds RestrictedPython and this file through explicit paths instead.
    rp_root = str(Path(RestrictedPython.__file__).resolve().parent.parent)
    boot = (
        "import sys, importlib.util as u; sys.path[:0] = sys.argv[2:]; "
        "s = u.spec_from_file_location('trajgraph_sandbox_child', sys.argv[1]); "
        "m = u.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m); "
        "m.child_main()"
    )
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-B", "-c", boot, CHILD_FILE, rp_root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env={"PATH": os.environ.get("PATH", os.defpath)},
        close_fds=True,
        start_new_session=True,
    )


def _feed(stream: IO[bytes], payload: bytes) -> None:
    # A thread, so a child that never reads stdin cannot block the parent's deadline.
    with contextlib.suppress(OSError, ValueError):  # the child died or was killed first
        try:
            stream.write(payload)
        finally:
            stream.close()


def _exchange(proc: subprocess.Popen[bytes], deadline: float, reply_cap: int) -> _Exchange:
    assert proc.stdout is not None and proc.stderr is not None
    result = _Exchange()
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                result.timed_out = True
                break
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data is out:
                    out += chunk
                elif len(err) < _STDERR_CAP:
                    err += chunk[: _STDERR_CAP - len(err)]
            if len(out) > reply_cap:
                result.overflow = True
                break
    result.stdout, result.stderr = bytes(out), bytes(err)
    return result


def _await_exit(pid: int, deadline: float) -> bool:
    """Wait until `pid` has exited without reaping it; False if the deadline passed first."""
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _close(*streams: IO[bytes] | None) -> None:
    for stream in streams:
        if stream is not None:
            stream.close()


def _verdict(
    exchange: _Exchange, returncode: int, limits: SandboxLimits
) -> tuple[Any, list[int], str | None]:
    if exchange.overflow:
        return None, [], f"output too large (more than {limits.max_output_bytes} bytes)"
    if exchange.timed_out:
        return None, [], f"time limit exceeded (wall clock {limits.wall_seconds:g} s)"
    # The profiling timer sends SIGPROF; RLIMIT_CPU's soft limit SIGXCPU, its hard one SIGKILL.
    if returncode in (-signal.SIGPROF, -signal.SIGXCPU, -signal.SIGKILL):
        return None, [], "time limit exceeded"
    if returncode < 0:
        return None, [], f"sandbox crashed ({signal.Signals(-returncode).name})"
    reply = _parse_reply(exchange.stdout)
    if reply is not None:
        return reply
    if b"MemoryError" in exchange.stderr:
        return None, [], "memory limit exceeded"
    lines = exchange.stderr.decode(errors="replace").strip().splitlines()
    return None, [], f"sandbox failed (exit {returncode}): {lines[-1] if lines else 'no reply'}"


def _parse_reply(stdout: bytes) -> tuple[Any, list[int], str | None] | None:
    try:
        reply = json.loads(stdout)
        touched = sorted({int(i) for i in reply["touched"]})
        error = reply["error"]
        value = _encodable(reply["value"])
        return value, touched, None if error is None else _encodable(str(error))
    except (ValueError, TypeError, KeyError):
        return None


def _encodable(value: Any) -> Any:
    """``value`` with every lone surrogate (``chr(55296)``: valid JSON as "\\ud800", not
    UTF-8) replaced by U+FFFD, so any JSON writer can send it on."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    return value
