"""What the hook client and server share: file names, limits, the decisions a hook may be
given, and the hook folder's private files. Standard library only: the client (hooks/command.py)
imports it on every tool call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

SOCKET_NAME = "hook.sock"
PID_NAME = "hook.pid"
LOG_NAME = "hook.log"
STARTING_NAME = "hook.starting"
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DECISIONS = ("auto", "context", "ask", "deny")  # auto: the agent's own (hooks/agents.py)
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def private_dir(hook_dir: Path) -> Path:
    """The hook folder, made or tightened to its user only: the log names transcript paths,
    session ids and error text. An existing folder made 0755 by an older version (or by
    hand) is tightened too, when it is this user's."""
    hook_dir.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    st = hook_dir.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o777 != PRIVATE_DIR:
        os.chmod(hook_dir, PRIVATE_DIR)
    return hook_dir


def open_private(path: Path, mode: str = "a") -> IO[Any]:
    """``open(path, mode)`` for appending, created (or tightened) readable by its user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_mode & 0o777 != PRIVATE_FILE:
            os.fchmod(fd, PRIVATE_FILE)
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
