"""The hook server: one warm ``HookEngine`` behind a Unix socket in the hook folder, and the
one dispatcher of hook calls (``handle``) for every agent.

A hook is a new process per tool call; importing the Neo4j driver, the extractor and the
tokenizer alone takes longer than a hook may. So ``trajgraph hook claude-code|codex`` is a
thin client (hooks/command.py), and this server (started by the first call, ``trajgraph
hook serve``) keeps the driver, the tokenizer and every session's read offset and
extractions in memory. It stops after ``--idle-minutes`` without a call.

Protocol: one JSON line per connection each way. Request ``{"agent", "tenant", "decision",
"input"}`` (``input`` is the hook's own stdin JSON); reply ``{"output", "timings_ms",
"error"}`` where ``output`` is the JSON for the agent, or null for silence. ``handle``
answers a request with the reply of its event (hooks/replies.py) given the adapter of its
agent (hooks/agents.py); the work is the engine's (hooks/engine.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
import signal
import socket
import socketserver
import threading
import time
from pathlib import Path
from typing import Any

from trajgraph.core import settings as settings_mod
from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.core.errors import BusyError, InputError
from trajgraph.hooks.agents import agent_of
from trajgraph.hooks.protocol import (
    LOG_NAME,
    MAX_MESSAGE_BYTES,
    PID_NAME,
    SOCKET_NAME,
    STARTING_NAME,
    open_private,
    private_dir,
)
from trajgraph.hooks.replies import REPLIES, Request

log = logging.getLogger("trajgraph.hook")

# Calls handled at once; one more is answered "busy" at once (silence) instead of holding a
# thread. Claude Code makes one call at a time per session, so this is many sessions' worth.
MAX_CONNECTIONS = 32
# A connection that sends no request line within this long is closed: a client that
# connected and hung (or never meant to write) held a thread for ever.
REQUEST_TIMEOUT_S = 10.0


class _PrivateLog(logging.handlers.RotatingFileHandler):
    """The hook log, created readable by its user only (it names transcript paths, session
    ids and error text); the default was 0644."""

    def _open(self) -> Any:
        return open_private(Path(self.baseFilename))


def configure_logging(hook_dir: Path) -> None:
    handler = _PrivateLog(hook_dir / LOG_NAME, maxBytes=2_000_000, backupCount=2, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def alive(sock_path: Path, timeout_s: float = 0.5) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(str(sock_path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def handle(engine: Any, request: dict[str, Any]) -> dict[str, Any]:
    """One request → the reply: the event's reply (hooks/replies.py) with the agent's adapter
    (hooks/agents.py). Errors become a reply with ``error`` (and silence)."""
    started = time.perf_counter()
    raw = request.get("input")
    hook: dict[str, Any] = raw if isinstance(raw, dict) else {}
    event = str(hook.get("hook_event_name") or "PreToolUse")
    agent = agent_of(request.get("agent"))
    reply = REPLIES.get(event)
    if reply is None:
        return {"output": None, "timings_ms": {}, "error": f"event {event!r} not handled"}
    call = Request(
        agent=agent,
        tenant=str(request.get("tenant") or DEFAULT_TENANT),
        decision=str(request.get("decision") or "auto"),
        event=event,
        hook=hook,
    )
    try:
        answer = reply.answer(engine, call)
    except Exception as e:  # a hook must never break the agent: log, answer with silence
        why = (agent.name, event, hook.get("session_id"))
        if isinstance(e, (InputError, BusyError)):  # the path or the moment, not a bug
            log.warning("%s %s hook call passed (session %s): %s", *why, e)
        else:
            log.exception("%s %s hook call failed (session %s)", *why)
        return {"output": None, "error": f"{type(e).__name__}: {e}"[:500], "timings_ms": {}}
    timings = {**answer.timings_ms, "server": round((time.perf_counter() - started) * 1000, 1)}
    log.info(
        "%s %s %s (%s)",
        agent.name,
        event,
        answer.note,
        " ".join(f"{k}={v}" for k, v in timings.items()),
    )
    return {"output": answer.output, "timings_ms": timings, "error": None}


def serve(settings: settings_mod.Settings, *, idle_minutes: float = 30.0) -> int:
    """Run until idle for ``idle_minutes`` (or SIGTERM). Returns 0; 0 too when a server is
    already listening (a second start is a no-op)."""
    hook_dir = private_dir(settings.hook_dir)
    configure_logging(hook_dir)
    sock_path = hook_dir / SOCKET_NAME
    if alive(sock_path):
        return 0
    with contextlib.suppress(FileNotFoundError):
        sock_path.unlink()

    from trajgraph.graph.connection import open_driver
    from trajgraph.graph.writer import ensure_schema
    from trajgraph.hooks.engine import HookEngine

    driver = open_driver(settings.neo4j)
    ensure_schema(driver, settings.neo4j.database)
    engine = HookEngine(
        driver,
        database=settings.neo4j.database,
        budget_tokens=settings.token_budget,
        batch_size=settings.write_batch_size,
    )
    last_call = [time.monotonic()]
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    class Handler(socketserver.StreamRequestHandler):
        timeout = REQUEST_TIMEOUT_S  # for reading the request line (and writing the reply)

        def handle(self) -> None:
            last_call[0] = time.monotonic()
            if not slots.acquire(blocking=False):
                reply: dict[str, Any] = {"output": None, "error": "busy", "timings_ms": {}}
            else:
                try:
                    reply = self._answer()
                finally:
                    slots.release()
            with contextlib.suppress(OSError):  # the client gave up waiting: fine
                self.wfile.write(json.dumps(reply, ensure_ascii=False).encode() + b"\n")
            last_call[0] = time.monotonic()

        def _answer(self) -> dict[str, Any]:
            try:
                raw = self.rfile.readline(MAX_MESSAGE_BYTES)
            except OSError as e:  # TimeoutError: connected, sent nothing
                return {"output": None, "error": f"no request: {e}", "timings_ms": {}}
            try:
                request = json.loads(raw)
                return handle(engine, request if isinstance(request, dict) else {})
            except ValueError as e:
                return {"output": None, "error": f"bad request: {e}", "timings_ms": {}}
            finally:
                engine.forget_sessions()

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True
        request_queue_size = MAX_CONNECTIONS  # the default 5 refused a burst of connections

    server = Server(str(sock_path), Handler)
    os.chmod(sock_path, 0o600)
    (hook_dir / PID_NAME).write_text(str(os.getpid()))
    with contextlib.suppress(FileNotFoundError):
        (hook_dir / STARTING_NAME).unlink()
    log.info("hook server %s listening on %s", os.getpid(), sock_path)

    def watchdog() -> None:
        while time.monotonic() - last_call[0] < idle_minutes * 60:
            time.sleep(min(5.0, idle_minutes * 60))
            engine.forget_sessions()  # sessions idle for long give their memory back
        log.info("hook server idle for %s minutes: stopping", idle_minutes)
        server.shutdown()

    threading.Thread(target=watchdog, daemon=True, name="trajgraph-hook-idle").start()
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            sock_path.unlink()
        with contextlib.suppress(FileNotFoundError):
            (hook_dir / PID_NAME).unlink()
        engine.close()
        driver.close()
    return 0


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # leaves serve_forever through its finally: socket and pid removed


def stop(settings: settings_mod.Settings, timeout_s: float = 10.0) -> bool:
    """SIGTERM the server whose pid file is in the hook folder; True when one was running."""
    pid_file = settings.hook_dir / PID_NAME
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return True
