"""The hook server's memory and threads under hostile transcript paths (issue 31).

A hook server (``trajgraph hook serve``) is started in a fresh hook folder, and fed the
paths an agent could hand it:

* ``zero``: ``transcript_path`` = ``/dev/zero`` (a device reports size 0, so a cap checked
  against the size read until memory ran out), 3 calls;
* ``fifo``: 20 FIFOs (``open()`` blocked for ever, holding a thread and the session lock);
* ``symlinks``: one transcript of ``--mb`` MB under ``--names`` symlinked names (each name
  kept its own parsed copy, with no total cap).

For each case it prints the server's RSS (``/proc/PID/status`` VmRSS, and the peak seen while
the calls ran, sampled every 50 ms) and its thread count before, at the peak and 3 s after
the calls, so two code versions can be compared in one run:

    python -m bench.hook_bounds                          # this checkout
    python -m bench.hook_bounds --code /tmp/old-checkout # another one (its trajgraph/ is
                                                         # put first on PYTHONPATH)

The server runs with an address-space limit (``--limit-mb``, 2048 by default) so that the
/dev/zero case of an unbounded version fails inside it instead of taking the machine's memory.
Needs a Neo4j at NEO4J_URI (the server connects at start).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SOCKET = "hook.sock"


def status(pid: int) -> dict[str, int]:
    """VmRSS (MB) and Threads of ``pid``."""
    out = {"rss_mb": 0, "threads": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) // 1024
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    except OSError:
        pass
    return out


def request(sock_path: Path, body: dict[str, Any], wait_s: float) -> dict[str, Any]:
    """One request line to the hook server at ``sock_path``, and its reply line (``{}`` when
    it closes without one); OSError (TimeoutError) when it does not answer in ``wait_s``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(wait_s)
    try:
        s.connect(str(sock_path))
        s.sendall(json.dumps(body).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    reply: dict[str, Any] = json.loads(data or b"{}")
    return reply


def ask(sock_path: Path, hook: dict[str, Any], wait_s: float) -> str:
    """Send one request; the reply's error (or "silence"), or "no reply" after ``wait_s``."""
    body = {"tenant": "bench-hook-bounds", "decision": "context", "input": hook}
    try:
        reply = request(sock_path, body, wait_s)
    except (TimeoutError, OSError) as e:
        return f"no reply ({type(e).__name__})"
    return str(reply.get("error") or "silence")[:120]


def hook_input(path: str, n: int) -> dict[str, Any]:
    return {
        "session_id": f"bench-{n}",
        "transcript_path": path,
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": f"toolu_{n}",
    }


def write_transcript(path: Path, mb: int, filler_kind: str) -> None:
    """A session of ``mb`` MB: one answered tool call, then filler records, cheap to sync so
    that the bench measures what is kept: ``snapshot``, Claude Code's file-history
    snapshots (bookkeeping), or ``text``, the user's words (conversation, kept whole)."""
    sid = "bench-hook-bounds-session"
    head = [
        {"type": "user", "sessionId": sid, "uuid": "u0", "message": {"content": "Fix it"}},
        {
            "type": "assistant",
            "sessionId": sid,
            "uuid": "a0",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t0", "name": "Bash", "input": {"command": "ls"}}
                ],
            },
        },
        {
            "type": "user",
            "sessionId": sid,
            "uuid": "u1",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t0", "content": "a"}]},
        },
    ]
    filler: dict[str, Any] = {
        "type": "file-history-snapshot",
        "snapshot": {"trackedFileBackups": {f"f{i}.py": {"v": "x" * 40} for i in range(40)}},
    }
    if filler_kind == "text":
        filler = {"type": "user", "sessionId": sid, "message": {"content": "words " * 400}}
    line = json.dumps(filler) + "\n"
    with path.open("w") as f:
        for rec in head:
            f.write(json.dumps(rec) + "\n")
        for _ in range(mb * 1024 * 1024 // len(line)):
            f.write(line)


def run_case(
    name: str,
    server: subprocess.Popen[bytes],
    sock: Path,
    calls: list[dict[str, Any]],
    wait_s: float,
    *,
    parallel: bool,
) -> dict[str, Any]:
    before = status(server.pid)
    peak = dict(before)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = status(server.pid)
            peak["rss_mb"] = max(peak["rss_mb"], now["rss_mb"])
            peak["threads"] = max(peak["threads"], now["threads"])
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    replies: list[str] = []
    workers = [
        threading.Thread(target=lambda h=h: replies.append(ask(sock, h, wait_s)), daemon=True)
        for h in calls
    ]
    started = time.monotonic()
    for w in workers:
        w.start()
        if not parallel:
            w.join(wait_s + 5)
    for w in workers:
        w.join(wait_s + 5)
    seconds = round(time.monotonic() - started, 1)
    time.sleep(3.0)
    done.set()
    sampler.join()
    after = status(server.pid)
    return {
        "case": name,
        "calls": len(calls),
        "seconds": seconds,
        "rss_mb": [before["rss_mb"], peak["rss_mb"], after["rss_mb"]],
        "threads": [before["threads"], peak["threads"], after["threads"]],
        "server_alive": server.poll() is None,
        "replies": sorted(set(replies)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--code", default=None, help="a checkout whose trajgraph/ to run (default: this one)"
    )
    p.add_argument("--mb", type=int, default=100, help="symlinks case: transcript size (100)")
    p.add_argument("--names", type=int, default=5, help="symlinks case: names of it (5)")
    p.add_argument("--filler", choices=("snapshot", "text"), default="snapshot")
    p.add_argument("--limit-mb", type=int, default=2048, help="the server's address-space limit")
    p.add_argument("--cases", default="zero,fifo,symlinks")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hook-bounds-"))
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = str(Path(args.code).resolve())
    limit = args.limit_mb * 1024 * 1024
    print(
        f"code: {args.code or 'this checkout'}; filler {args.filler}; one fresh server per "
        "case; RSS MB and threads as before / peak / 3 s after the calls"
    )
    for case in args.cases.split(","):
        print(json.dumps(one_server(case, work / case, env, limit, args)), flush=True)
    return 0


def one_server(
    case: str, work: Path, env: dict[str, str], limit: int, args: argparse.Namespace
) -> dict[str, Any]:
    work.mkdir(parents=True)
    hook_dir = work / "hook"

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    server = subprocess.Popen(
        [sys.executable, "-m", "trajgraph.cli", "hook", "serve", "--idle-minutes", "30"],
        env={**env, "TRAJGRAPH_HOOK_DIR": str(hook_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=cap,
    )
    sock = hook_dir / SOCKET
    try:
        end = time.monotonic() + 120
        while not sock.exists() and time.monotonic() < end and server.poll() is None:
            time.sleep(0.2)
        if not sock.exists():
            return {"case": case, "error": "the hook server did not start"}
        time.sleep(1.0)
        if case == "zero":
            calls = [hook_input("/dev/zero", n) for n in range(3)]
            return run_case(case, server, sock, calls, 10.0, parallel=True)
        if case == "fifo":
            fifos = []
            for n in range(20):
                fifo = work / f"fifo-{n}.jsonl"
                os.mkfifo(fifo)
                fifos.append(str(fifo))
            calls = [hook_input(f, n) for n, f in enumerate(fifos)]
            return run_case(case, server, sock, calls, 3.0, parallel=True)
        real = work / "session.jsonl"
        write_transcript(real, args.mb, args.filler)
        names = []
        for n in range(args.names):
            link = work / f"link-{n}.jsonl"
            link.symlink_to(real)
            names.append(str(link))
        # One name after another, as sessions come: each call waits for the one before.
        calls = [hook_input(name, n) for n, name in enumerate(names)]
        return run_case(case, server, sock, calls, 300.0, parallel=False)
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        (work / "session.jsonl").unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
