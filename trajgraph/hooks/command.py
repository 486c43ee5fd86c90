"""``trajgraph hook claude-code|codex``: the command the agent runs at ``PreToolUse``,
``PostToolUse``, ``SessionStart`` and ``UserPromptSubmit`` with the hook's JSON on stdin
(docs/hooks.md), a thin client of the hook server, the same for every agent.

It never breaks the agent: whatever happens (no server yet, Neo4j down, a bad transcript, a
timeout, a bug), it exits 0 with no output, and the reason goes to the hook log. Silence is
also the normal answer; the server's reply (hooks/replies.py) is printed as it comes.

The work happens in the hook server (server.py), which this command starts when none is
listening; that first call passes through silently. ``--in-process`` does the work here
instead (slow: seconds of imports; for debugging and tests). Run on every tool call, it
imports only the standard library and what it shares with the server (protocol.py, and
replies.py for what each event's input must hold): bench/startup.py times it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trajgraph.core.env import hook_dir_of, tenant_of
from trajgraph.hooks.protocol import (
    DECISIONS,
    LOG_NAME,
    MAX_MESSAGE_BYTES,
    SOCKET_NAME,
    STARTING_NAME,
    open_private,
    private_dir,
)
from trajgraph.hooks.replies import REPLIES

MAX_INPUT_BYTES = 4 * 1024 * 1024
DEFAULT_BUDGET_MS = 1000
STARTING_GRACE_S = 60.0


class PassThrough(Exception):
    """Why this call answers with silence (logged, never shown)."""


def build_parser(agent: str = "claude-code") -> argparse.ArgumentParser:
    # No -h: a hook never exits on a flag; `trajgraph hook claude-code --help` prints this
    # parser's help in trajgraph.cli before the hook runs.
    p = argparse.ArgumentParser(
        prog=f"trajgraph hook {agent}",
        add_help=False,
        description="The hook of Claude Code or Codex: reads the hook JSON on stdin, answers a "
        "tool call with a reminder or nothing, SessionStart / UserPromptSubmit with the "
        "project's memory or nothing; always exits 0 (docs/hooks.md).",
    )
    p.add_argument(
        "--decision",
        choices=DECISIONS,
        default="auto",
        help="auto (default): the channel this agent and version show the model "
        "(docs/hooks.md); context: additionalContext; ask: ask the user; deny: block the call",
    )
    p.add_argument("--tenant", default=None, help="default TRAJGRAPH_TENANT")
    p.add_argument(
        "--budget-ms",
        type=float,
        default=DEFAULT_BUDGET_MS,
        help=f"wait at most this long for an answer, then silence ({DEFAULT_BUDGET_MS:g})",
    )
    p.add_argument(
        "--in-process", action="store_true", help="do the work in this process (debugging)"
    )
    p.add_argument(
        "--no-start", action="store_true", help="do not start a hook server when none listens"
    )
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: Any = None,
    stdout: Any = None,
    agent: str = "claude-code",
) -> int:
    started = time.monotonic()
    out = stdout or sys.stdout
    hook_dir: Path | None = None
    hook: dict[str, Any] = {}
    try:
        # Two settings, read as settings.load() reads them; the others are the server's.
        hook_dir, tenant = hook_dir_of(os.environ), tenant_of(os.environ)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                args, _ = build_parser(agent).parse_known_args(list(argv or []))
        except SystemExit as e:  # a bad flag in settings.json must not block the agent
            raise PassThrough("bad hook command-line flags") from e
        hook = read_input(stdin or sys.stdin.buffer)
        request = {
            "agent": agent,
            "tenant": args.tenant or tenant,
            "decision": args.decision,
            "input": hook,
        }
        deadline = started + args.budget_ms / 1000
        if args.in_process:
            from trajgraph.core import settings as settings_mod

            reply = _in_process(settings_mod.load(), request, deadline)
        else:
            reply = _ask_server(hook_dir, request, deadline, start=not args.no_start)
        if reply.get("error"):
            raise PassThrough(f"server: {reply['error']}")
        output = reply.get("output")
        if output:
            out.write(json.dumps(output, ensure_ascii=False) + "\n")
            out.flush()
    except PassThrough as e:
        _log(hook_dir, hook, str(e), started)
    except Exception as e:  # never a traceback, never a non-zero exit
        _log(hook_dir, hook, f"{type(e).__name__}: {e}", started)
    return 0


def read_input(stream: Any) -> dict[str, Any]:
    raw = stream.read(MAX_INPUT_BYTES + 1)
    if len(raw) > MAX_INPUT_BYTES:
        raise PassThrough(f"hook input over {MAX_INPUT_BYTES} bytes")
    try:
        hook = json.loads(raw)
    except ValueError as e:
        raise PassThrough(f"hook input is not JSON: {e}") from e
    if not isinstance(hook, dict):
        raise PassThrough("hook input is not a JSON object")
    event = hook.get("hook_event_name") or "PreToolUse"
    if event not in REPLIES:
        raise PassThrough(f"event {event!r} is not handled")
    for name, not_empty in REPLIES[event].needs.items():
        value = hook.get(name)
        if not isinstance(value, str) or (not_empty and not value):
            raise PassThrough(f"hook input has no {name}")
    return hook


def _ask_server(
    hook_dir: Path, request: dict[str, Any], deadline: float, *, start: bool
) -> dict[str, Any]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            sock.connect(str(hook_dir / SOCKET_NAME))
        except (FileNotFoundError, ConnectionRefusedError) as e:
            if start:
                _start_server(hook_dir)
                raise PassThrough("no hook server was listening: starting one") from e
            raise PassThrough("no hook server is listening") from e
        sock.sendall(json.dumps(request, ensure_ascii=False).encode() + b"\n")
        if request["input"].get("hook_event_name") == "PostToolUse":
            return {}  # nothing to answer: the server brings the turn in after we left
        chunks: list[bytes] = []
        size = 0
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError as e:
                raise PassThrough("timed out waiting for the hook server") from e
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if chunk.endswith(b"\n") or size > MAX_MESSAGE_BYTES:
                break
    finally:
        sock.close()
    reply = json.loads(b"".join(chunks) or b"{}")
    return reply if isinstance(reply, dict) else {}


def _start_server(hook_dir: Path) -> None:
    """Start ``trajgraph hook serve`` detached, unless another call just did."""
    private_dir(hook_dir)
    marker = hook_dir / STARTING_NAME
    with contextlib.suppress(FileNotFoundError):
        if time.time() - marker.stat().st_mtime < STARTING_GRACE_S:
            return
        marker.unlink()
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    with open_private(hook_dir / LOG_NAME, "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "trajgraph.cli", "hook", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def _in_process(settings: Any, request: dict[str, Any], deadline: float) -> dict[str, Any]:
    from trajgraph.graph.connection import open_driver
    from trajgraph.hooks.engine import HookEngine
    from trajgraph.hooks.server import handle

    reply: dict[str, Any] = {"error": "timed out"}

    def work() -> None:
        driver = open_driver(settings.neo4j)
        engine = HookEngine(
            driver, database=settings.neo4j.database, budget_tokens=settings.token_budget
        )
        try:
            reply.update(handle(engine, request))
        finally:
            engine.close()
            driver.close()

    # Importing and connecting take seconds here, so the budget is only a guard against a hang.
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0) + 30.0)
    return reply


def _log(hook_dir: Path | None, hook: dict[str, Any], reason: str, started: float) -> None:
    if hook_dir is None:
        return
    with contextlib.suppress(OSError):
        private_dir(hook_dir)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        ms = round((time.monotonic() - started) * 1000)
        line = (
            f"{stamp} PASS {hook.get('hook_event_name') or '-'} session "
            f"{hook.get('session_id') or '-'} tool {hook.get('tool_name') or '-'}: "
            f"{' '.join(reason.split())[:500]} ({ms} ms)\n"
        )
        with open_private(hook_dir / LOG_NAME) as f:
            f.write(line)
