"""Claude Code session transcripts: ``~/.claude/projects/<project>/<session>.jsonl``.

A transcript is one JSON record per line, appended as the session runs; the whole file is
one input record (its trajectory spans lines). What becomes what (docs/formats/claude-code.md):

* **one trajectory per session** (``sessionId``); every ``tool_use`` of an assistant record
  is a turn, in transcript order (an append-only file lists every record after its
  ``parentUuid``). The ``tool_result`` with the same id in a later user record is the
  observation; a call still waiting for its result (the session was cut, or is running) is
  a turn with an empty observation.
* the user's prompts and the assistant's text (and non-empty ``thinking``) are **context on
  the turn they precede** (its ``thought``, user prompts as ``User: …``), not turns; the
  first prompt is the task.
* a failed call (``is_error``) keeps what the model saw: a Bash failure starts ``Exit code N``
  (the exit code is in the text); any other failure reads ``Error: <message>``, exactly
  Claude Code's own ``toolUseResult`` text for it, so failures become error states.
* tools render so that what they act on is plain: ``Bash`` as its command; ``Edit`` /
  ``MultiEdit`` as ``edit PATH`` with ``<old_str>``/``<new_str>`` blocks; ``Write`` as
  ``write PATH`` and the content; ``Read`` as ``read PATH``; every other tool as
  ``Name({json arguments})``.
* **sub-agents** (the ``Agent``/``Task`` tool) are kept apart from the main line: their work
  (``agent_progress`` records, or ``isSidechain`` records of older versions) becomes its own
  trajectory ``<sessionId>/agent-<agentId>`` whose task is the prompt it was given; in the
  main line the ``Agent`` call is one turn whose observation is the sub-agent's answer. When
  the sub-agent's own transcript ``<session>/subagents/agent-<agentId>.jsonl`` sits next to
  the session file, that file is the sub-agent's record and the copy in the session file
  is not used (a folder ingest reads both, without duplicates).
* bookkeeping is skipped: ``file-history-snapshot``, ``queue-operation``, ``last-prompt``,
  ``system``, hook progress, ``isMeta`` user records; unknown record types are counted and
  skipped (the format changes between versions).
* a torn last line (the session is being written) is not an error; an unreadable line in the
  middle is skipped and its number kept in ``metadata.bad_lines``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import Lines, LogFormat, lines_of, one_or_array_of
from trajgraph.pipelines.adapters.base import read_lines as read_lines  # for hooks/session_sync
from trajgraph.pipelines.adapters.calls import CallLine, ToolCall
from trajgraph.pipelines.adapters.canonical import (
    as_text,
    file_stem,
    new_trajectory,
    new_turn,
    small_json,
    text_of,
)
from trajgraph.pipelines.adapters.canonical import (
    field as object_field,
)

FORMAT = "claude-code"

# Record types that are a conversation; everything else is bookkeeping or unknown.
CONVERSATION = frozenset({"user", "assistant"})
# Every record type of a transcript: what makes a line a transcript record at all.
RECORD_TYPES = CONVERSATION | {
    "file-history-snapshot",
    "queue-operation",
    "last-prompt",
    "system",
    "summary",
    "progress",
}
_EXIT_HEAD = re.compile(r"^Exit code -?\d+\b")
_TOOL_USE_ERROR = re.compile(r"^\s*<tool_use_error>(.*)</tool_use_error>\s*$", re.DOTALL)
# User records the harness writes (slash commands, their output, interruptions): context,
# never the task.
_HARNESS_TEXT = re.compile(
    r"^\s*(?:<command-name>|<command-message>|<local-command-|\[Request interrupted)"
)
MAX_BAD_LINES = 20
FINAL_TEXT_CHARS = 2_000
SUBAGENT_TOOLS = frozenset({"Agent", "Task"})


# -- one conversation line (the main line, or one sub-agent) ------------------------------------


@dataclass
class Call(ToolCall):
    is_error: bool = False


@dataclass
class Line(CallLine[Call]):
    """The turns of one agent (the main line, or a sub-agent) as the transcript gives them."""

    key: str  # "" for the main line, else the agent id
    model: str | None = None
    parent_tool_use_id: str | None = None
    first_timestamp: str | None = None

    def prompt(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        if not self.task and not self.calls and not _HARNESS_TEXT.match(text):
            self.task = text
        else:
            self.context.append(f"User: {text}")

    def call(self, part: dict[str, Any], timestamp: str | None) -> None:
        name = str(part.get("name") or "tool")
        call_id = str(part.get("id") or f"call-{len(self.calls)}")
        self.open(Call(call_id, name, render_action(name, part.get("input")), timestamp))

    def result(self, part: dict[str, Any]) -> None:
        call = self.answer(str(part.get("tool_use_id")))
        if call is None:
            return
        call.is_error = part.get("is_error") is True
        call.observation = observation_text(part.get("content"), call.is_error)


def render_action(name: str, args: Any) -> str:
    """The call as text: what it runs or the file it acts on first, arguments verbatim."""
    a = args if isinstance(args, dict) else {}
    path = a.get("file_path") or a.get("notebook_path")
    if name == "Bash" and isinstance(a.get("command"), str):
        return str(a["command"])
    if name in ("Edit", "MultiEdit", "NotebookEdit") and isinstance(path, str):
        edits = a.get("edits") if name == "MultiEdit" else [a]
        blocks = [f"edit {path}"]
        for edit in edits if isinstance(edits, list) else []:
            if not isinstance(edit, dict):
                continue
            old = edit.get("old_string")
            new = edit.get("new_string", edit.get("new_source"))
            if old is not None:
                blocks.append(f"<old_str>\n{as_text(old)}\n</old_str>")
            if new is not None:
                blocks.append(f"<new_str>\n{as_text(new)}\n</new_str>")
            if edit.get("replace_all") is True:
                blocks.append("<replace_all>true</replace_all>")
        return "\n".join(blocks)
    if name == "Write" and isinstance(path, str):
        return f"write {path}\n{as_text(a.get('content'))}"
    if name == "Read" and isinstance(path, str):
        window = {k: a[k] for k in ("offset", "limit", "pages") if k in a}
        return f"read {path}" + (f" {json.dumps(window)}" if window else "")
    return f"{name}({as_text(args if args is not None else {})})"


def observation_text(content: Any, is_error: bool) -> str:
    """What the model was shown; a failure without an exit code reads ``Error: …``."""
    text = _content_text(content)
    if not is_error or _EXIT_HEAD.match(text):
        return text
    wrapped = _TOOL_USE_ERROR.match(text)
    message = wrapped.group(1) if wrapped else text
    return message if message.startswith("Error") else f"Error: {message}"


def _content_text(content: Any) -> str:
    return text_of(content, image="[image]")


# -- the whole session -------------------------------------------------------------------------


@dataclass
class Session:
    session_id: str
    main: Line
    agents: dict[str, Line]
    metadata: dict[str, Any]


def read_session(records: list[dict[str, Any]]) -> Session:
    """Walk a transcript's records (file order) into the main line and its sub-agents."""
    main = Line("")
    agents: dict[str, Line] = {}
    skipped: dict[str, int] = {}
    meta: dict[str, Any] = {}
    session_id = ""

    def agent(key: str) -> Line:
        if key not in agents:
            agents[key] = Line(key)
        return agents[key]

    def skip(kind: str) -> None:
        skipped[kind] = skipped.get(kind, 0) + 1

    for rec in records:
        kind = rec.get("type")
        session_id = session_id or str(rec.get("sessionId") or "")
        if kind == "summary" and isinstance(rec.get("summary"), str):
            meta.setdefault("summary", rec["summary"][:500])
        if kind == "progress":
            data = object_field(rec, "data")
            if data.get("type") == "agent_progress" and isinstance(data.get("message"), dict):
                line = agent(str(data.get("agentId") or rec.get("parentToolUseID") or "agent"))
                line.parent_tool_use_id = line.parent_tool_use_id or rec.get("parentToolUseID")
                inner = data["message"]
                _message(line, inner, inner.get("timestamp") or rec.get("timestamp"))
            else:
                skip(f"progress/{data.get('type')}")
            continue
        if kind not in CONVERSATION:
            skip(str(kind))
            continue
        if rec.get("isSidechain") is True:
            line = agent(str(rec.get("agentId") or "sidechain"))
        else:
            line = main
            for key in ("cwd", "gitBranch", "version", "slug"):
                if rec.get(key) and key not in meta:
                    meta[key] = rec[key]
        if rec.get("isMeta") is True:
            skip("meta")
            continue
        _message(line, rec, rec.get("timestamp"))
    meta["skipped_records"] = dict(sorted(skipped.items()))
    return Session(session_id, main, agents, meta)


def _message(line: Line, rec: dict[str, Any], timestamp: Any) -> None:
    message = object_field(rec, "message")
    stamp = str(timestamp) if timestamp else None
    line.first_timestamp = line.first_timestamp or stamp
    content = message.get("content")
    role = rec.get("type") or message.get("role")
    if role == "assistant":
        if message.get("model") and not line.model and message["model"] != "<synthetic>":
            line.model = str(message["model"])
        for part in content if isinstance(content, list) else [content]:
            if isinstance(part, str):
                line.said(part)
            elif isinstance(part, dict):
                if part.get("type") == "tool_use":
                    line.call(part, stamp)
                elif part.get("type") == "text":
                    line.said(as_text(part.get("text")))
                elif part.get("type") == "thinking":
                    line.said(as_text(part.get("thinking")))
        return
    if isinstance(content, str):
        line.prompt(content)
        return
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "tool_result":
            line.result(part)
        elif part.get("type") == "text":
            line.prompt(as_text(part.get("text")))


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """What :func:`read_session` reads of a record it skips (bookkeeping, unknown types): its
    type and session id. A long-lived reader (the hook server) keeps these instead of, say,
    every ``file-history-snapshot`` whole: the session it reads is the same."""
    kind = record.get("type")
    if kind in CONVERSATION or kind in ("summary", "progress"):
        return record
    return {"type": kind, "sessionId": record.get("sessionId")}


# -- trajectories ------------------------------------------------------------------------------


def subagent_id(session_id: str, agent_key: str) -> str:
    return f"{session_id}/agent-{agent_key}"


def sidechain_file(source: str, session_id: str, agent_key: str) -> Path:
    """Where Claude Code keeps a sub-agent's own transcript, next to the session file."""
    return Path(source).parent / session_id / "subagents" / f"agent-{agent_key}.jsonl"


def turns_of(line: Line) -> list[dict[str, Any]]:
    return [
        new_turn(
            i,
            c.action,
            c.observation,
            thought=c.thought or None,
            timestamp=c.timestamp,
            actor="agent",
        )
        for i, c in enumerate(line.calls)
    ]


def trajectories_of(session: Session, lines: Lines, *, source: str) -> list[dict[str, Any]]:
    sid = session.session_id or file_stem(source)
    main_meta: dict[str, Any] = {
        "session_id": sid,
        **session.metadata,
        "model": session.main.model,
        "records": len(lines.records),
        "tool_calls": len(session.main.calls),
        "unanswered_calls": sum(1 for c in session.main.calls if not c.answered),
        "failed_calls": sum(1 for c in session.main.calls if c.is_error),
        "orphan_results": session.main.orphan_results or None,
        "torn_last_line": lines.torn_last_line or None,
        "bad_lines": lines.bad_lines[:MAX_BAD_LINES] or None,
    }
    if session.main.final_text:
        main_meta["final_text"] = session.main.final_text[:FINAL_TEXT_CHARS]
    sidechain = _is_sidechain_file(lines.records)
    out: list[dict[str, Any]] = []
    subagents: list[str] = []
    for key, line in session.agents.items():
        if not line.calls and not line.task:
            continue
        if not sidechain and sidechain_file(source, sid, key).is_file():
            continue  # the sub-agent's own transcript is its record
        tid = subagent_id(sid, key)
        subagents.append(tid)
        meta = {
            "session_id": sid,
            "agent_id": key,
            "parent_tool_use_id": line.parent_tool_use_id,
            "model": line.model,
            "tool_calls": len(line.calls),
            "failed_calls": sum(1 for c in line.calls if c.is_error),
        }
        if line.final_text:
            meta["final_text"] = line.final_text[:FINAL_TEXT_CHARS]
        out.append(
            new_trajectory(
                id=tid,
                task=line.task,
                source=source,
                format=FORMAT,
                turns=turns_of(line),
                metadata=meta,
            )
        )
    if sidechain and not session.main.calls and not session.main.task:
        return out  # a sub-agent's own transcript: nothing of the main line in it
    if subagents and small_json(subagents):
        main_meta["subagents"] = subagents
    main = new_trajectory(
        id=sid,
        task=session.main.task or str(session.metadata.get("summary") or ""),
        source=source,
        format=FORMAT,
        turns=turns_of(session.main),
        metadata=main_meta,
    )
    return [main, *out]


def _is_sidechain_file(records: list[dict[str, Any]]) -> bool:
    convo = [r for r in records if r.get("type") in CONVERSATION]
    return bool(convo) and all(r.get("isSidechain") is True for r in convo)


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    """A transcript (the whole JSONL file, or a JSON array of its records) → trajectories:
    the main line first, then one per sub-agent."""
    lines = lines_of(obj)
    if lines is None:
        raise InputError("a Claude Code transcript is a JSONL file of records", source=source)
    if not any(r.get("type") in CONVERSATION for r in lines.records):
        raise InputError(
            "Claude Code transcript holds no user or assistant record "
            f"({len(lines.records)} bookkeeping records)",
            source=source,
        )
    return trajectories_of(read_session(lines.records), lines, source=source)


# -- detection ---------------------------------------------------------------------------------


def is_record(obj: Any) -> bool:
    """One line of a Claude Code transcript."""
    if not isinstance(obj, dict) or obj.get("type") not in RECORD_TYPES:
        return False
    if obj["type"] == "file-history-snapshot":
        return "snapshot" in obj or "messageId" in obj
    if obj["type"] == "summary":
        return "leafUuid" in obj
    return "sessionId" in obj and (
        "uuid" in obj or obj["type"] in ("queue-operation", "last-prompt")
    )


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=one_or_array_of(is_record),
    shape="JSONL of Claude Code transcript records ('type' user/assistant/..., "
    "'sessionId', 'uuid')",
    line=is_record,
    spans_lines=True,
)
