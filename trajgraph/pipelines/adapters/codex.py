"""OpenAI Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``.

A rollout is one JSON object per line, ``{"timestamp", "type", "payload"}``, appended while
the session runs; the whole file is one input record (its trajectory spans lines). What
becomes what (docs/formats/codex.md):

* **one trajectory per rollout**, id = ``session_meta.id`` (the file stem when absent).
* **one turn per tool call**, in file order: the ``response_item`` items ``function_call``,
  ``custom_tool_call`` and ``local_shell_call`` (observation: the ``*_output`` item with the
  same ``call_id``), and ``web_search_call`` (a hosted tool: its query is the action, it has
  no output item). A call without an output yet is a turn with an empty observation.
* the **exit code** from wherever the CLI version puts it: inside the output JSON
  (``{"output", "metadata": {"exit_code"}}``, the ``shell`` tool of CLI <= 0.58 and
  ``apply_patch``), in the output text (``Process exited with code N``, ``exec_command``), or
  in an ``event_msg`` ``exec_command_end`` / ``patch_apply_end`` (a process that outlived its
  call reports there). An exit code the text does not already state is put first as
  ``Exit code N`` (as Claude Code's Bash failures read), so the extractor sees it.
* ``apply_patch`` renders as ``apply_patch PATH ...`` then the patch verbatim: the
  extractor records a ``file_changed`` state on every path of the patch.
* the user's prompts (the ``user_message`` events: what was typed; the user messages when a
  version writes no such events), assistant messages and reasoning **summaries** are context
  on the turn they precede; encrypted reasoning is skipped (counted); the harness's own
  messages (``developer``, ``<environment_context>``, AGENTS.md instructions) are skipped.
  The first user prompt is the task.
* ``compacted`` (the CLI summarized the conversation) is kept as a marker: a context line on
  the next turn and ``metadata.compactions`` (the turn indexes it came before).
* ``event_msg`` lines other than the two above repeat the response items or are bookkeeping
  (token counts); they and unknown line types are skipped and counted, since the format
  changes between versions. A torn last line is not an error; arguments that are not JSON
  (a redacted log, a truncated call) are kept verbatim.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import (
    Lines,
    LogFormat,
    lines_of,
    one_or_array_of,
    parse_json,
)
from trajgraph.pipelines.adapters.calls import CallLine, ToolCall
from trajgraph.pipelines.adapters.canonical import as_text, file_stem, new_trajectory, new_turn
from trajgraph.pipelines.adapters.canonical import field as object_field

FORMAT = "codex"

# Top-level line types of a rollout.
LINE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
# Every response item that is one tool call, hence one turn (tests count them).
TOOL_CALL_ITEMS = CALL_ITEMS | {"web_search_call"}
SHELL_TOOLS = frozenset({"shell", "container.exec", "local_shell", "shell_command"})
# User messages the CLI writes itself: instructions and environment, never the task.
_HARNESS_TEXT = re.compile(
    r"^\s*(?:<environment_context>|<user_instructions>|<permissions instructions>"
    r"|# AGENTS\.md instructions|<INSTRUCTIONS>|<turn_aborted>|<user_shell_command>)"
)
_EXIT_IN_TEXT = re.compile(r"^(?:Exit code -?\d+\b|.*\bexited with code -?\d+\b)", re.M)
_EXIT_CODE_TEXT = re.compile(r"\bexited with code (-?\d+)\b")
_PATCH_PATH = re.compile(
    r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M
)
MAX_BAD_LINES = 20
FINAL_TEXT_CHARS = 2_000
ESCALATED = "# codex: run outside the sandbox (require_escalated)"
COMPACTED_MARK = "[Codex compacted the conversation here: earlier context was summarized]"


@dataclass
class Call(ToolCall):
    exit_code: int | None = None
    failed: bool = False


@dataclass
class Rollout(CallLine[Call]):
    """A rollout's lines walked into calls, context and session facts."""

    meta: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    compactions: list[int] = field(default_factory=list)
    encrypted_reasoning: int = 0
    # exit codes reported by events, by call id (the event may come before or after the output)
    event_exits: dict[str, int] = field(default_factory=dict)
    # Where the user's prompts are read: the ``user_message`` events (what was typed) when the
    # rollout has them; else the user messages (some versions write no events).
    prompts_from_events: bool = True

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1

    def prompt(self, text: str) -> None:
        text = text.strip()
        if not text or _HARNESS_TEXT.match(text):
            return
        if not self.task and not self.calls:
            self.task = text
        else:
            self.context.append(f"User: {text}")

    def call(self, call_id: str, name: str, action: str, timestamp: str | None) -> Call:
        return self.open(Call(call_id or f"call-{len(self.calls)}", name, action, timestamp))

    def output(self, call_id: str, output: Any) -> None:
        call = self.answer(call_id)
        if call is None:
            return
        text, code = output_text(output)
        call.observation = text
        if code is not None:
            call.exit_code = code


# -- rendering ---------------------------------------------------------------------------------


def parse_arguments(raw: Any) -> Any:
    """A call's ``arguments``: parsed when it is a JSON string, else the text verbatim (a
    redacted or cut log holds text that is not JSON; it is still the call). Parsed as the
    record was (``base.parse_json``): a lone surrogate escape inside becomes U+FFFD."""
    if not isinstance(raw, str):
        return raw
    try:
        return parse_json(raw)
    except ValueError:  # not JSON, nested too deeply, a non-finite number
        return raw


def _shell_text(command: Any) -> str | None:
    """``["bash", "-lc", "X"]`` → ``X``; any other argv list joined as a shell line."""
    if isinstance(command, str):
        return command
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        return None
    if len(command) == 3 and command[1] in ("-lc", "-c") and command[0].endswith("sh"):
        return command[2]
    return shlex.join(command)


def patch_paths(patch: str) -> list[str]:
    """The files an ``apply_patch`` patch touches, in order (added, updated, deleted, moved)."""
    paths: list[str] = []
    for m in _PATCH_PATH.finditer(patch):
        path = m.group(1) or m.group(2)
        if path and path not in paths:
            paths.append(path)
    return paths


def render_patch(patch: str) -> str:
    paths = patch_paths(patch)
    head = "apply_patch " + " ".join(paths) if paths else "apply_patch"
    return f"{head}\n{patch}"


def render_action(name: str, args: Any) -> str:
    """The call as text: the command it runs or the files it edits first, arguments verbatim.
    A command run outside the sandbox says so on a second line: it is another action than the
    same command inside it (which the sandbox may have refused)."""
    a = args if isinstance(args, dict) else {}
    shell = _shell_text(a.get("command")) if name in SHELL_TOOLS else None
    if name == "exec_command" and isinstance(a.get("cmd"), str):
        shell = str(a["cmd"])
    if shell is not None:
        escalated = a.get("sandbox_permissions") == "require_escalated" or (
            a.get("with_escalated_permissions") is True
        )
        return f"{shell}\n{ESCALATED}" if escalated else shell
    if name == "apply_patch":
        patch = args if isinstance(args, str) else a.get("input", a.get("patch"))
        if isinstance(patch, str):
            return render_patch(patch)
    if isinstance(args, str):
        return f"{name}({args})"  # not JSON: verbatim
    return f"{name}({as_text(args if args is not None else {})})"


def output_text(output: Any) -> tuple[str, int | None]:
    """What the model was shown, and the exit code when the output carries one: the shell
    tool's ``{"output", "metadata": {"exit_code"}}`` JSON, or ``Process exited with code N``."""
    if isinstance(output, dict):
        text = as_text(output.get("content", output.get("output", output)))
        return text, None
    if isinstance(output, list):  # content items: input_text / output_text / input_image
        parts = []
        for part in output:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and str(part.get("type", "")).endswith("image"):
                parts.append("[image]")
        return "\n".join(parts), None
    text = as_text(output)
    if text.startswith("{") and '"metadata"' in text:
        parsed = parse_arguments(text)
        meta = object_field(parsed, "metadata")
        if isinstance(parsed, dict) and "output" in parsed:
            code = meta.get("exit_code")
            ok = isinstance(code, int) and not isinstance(code, bool)
            return as_text(parsed["output"]), code if ok else None
    m = _EXIT_CODE_TEXT.search(text)
    return text, int(m.group(1)) if m else None


def observation(call: Call) -> str:
    """The output, with ``Exit code N`` first when the text does not state its exit code."""
    text = call.observation
    if call.exit_code is None or _EXIT_IN_TEXT.search(text[:2000]):
        return text
    return f"Exit code {call.exit_code}\n{text}" if text else f"Exit code {call.exit_code}"


# -- walking the lines -------------------------------------------------------------------------


def read_rollout(records: list[dict[str, Any]]) -> Rollout:
    r = Rollout()
    r.prompts_from_events = any(
        rec.get("type") == "event_msg"
        and object_field(rec, "payload").get("type") == "user_message"
        for rec in records
    )
    for rec in records:
        kind = rec.get("type")
        payload = rec.get("payload")
        stamp = str(rec["timestamp"]) if rec.get("timestamp") else None
        if kind not in LINE_TYPES or not isinstance(payload, dict):
            r.skip(str(kind))
            continue
        if kind == "session_meta":
            _session_meta(r, payload)
        elif kind == "turn_context":
            for key in ("cwd", "model"):
                if isinstance(payload.get(key), str) and key not in r.meta:
                    r.meta[key] = payload[key]
        elif kind == "compacted":
            r.compactions.append(len(r.calls))
            r.context.append(COMPACTED_MARK)
        elif kind == "event_msg":
            _event(r, payload)
        else:
            _item(r, payload, stamp)
    for call_id, code in r.event_exits.items():
        call = r.by_id.get(call_id)
        if call is not None and call.exit_code is None:
            call.exit_code = code
    for call in r.calls:
        call.failed = call.failed or (call.exit_code is not None and call.exit_code != 0)
    return r


def _session_meta(r: Rollout, p: dict[str, Any]) -> None:
    if "session_id" in r.meta:
        return  # a resumed or forked rollout repeats it: the first is this file's
    r.meta["session_id"] = str(p.get("id") or "")
    for key in ("cwd", "cli_version", "originator", "source", "model_provider"):
        if isinstance(p.get(key), str):
            r.meta[key] = p[key]
    git = object_field(p, "git")
    for key, name in (("branch", "git_branch"), ("repository_url", "git_repository_url")):
        if isinstance(git.get(key), str):
            r.meta[name] = git[key]
    if isinstance(git.get("commit_hash"), str):
        r.meta["git_commit"] = git["commit_hash"]


def _event(r: Rollout, p: dict[str, Any]) -> None:
    kind = str(p.get("type"))
    call_id = str(p.get("call_id") or "")
    code = p.get("exit_code")
    if kind == "exec_command_end" and isinstance(code, int) and not isinstance(code, bool):
        r.event_exits[call_id] = code
    elif kind == "user_message" and isinstance(p.get("message"), str):
        r.prompt(p["message"])
    elif kind == "patch_apply_end" and isinstance(p.get("success"), bool):
        r.event_exits.setdefault(call_id, 0 if p["success"] else 1)
        if not p["success"] and call_id in r.by_id:
            r.by_id[call_id].failed = True
    else:
        r.skip(f"event_msg/{kind}")


def _item(r: Rollout, p: dict[str, Any], stamp: str | None) -> None:
    kind = str(p.get("type"))
    if kind == "message":
        role = p.get("role")
        text = _message_text(p.get("content"))
        if role == "user" and not r.prompts_from_events:
            r.prompt(text)
        elif role == "assistant":
            r.said(text)
        else:
            r.skip(f"message/{role}")
    elif kind == "reasoning":
        summary = p.get("summary")
        texts = [
            s["text"]
            for s in (summary if isinstance(summary, list) else [])
            if isinstance(s, dict) and isinstance(s.get("text"), str)
        ]
        if texts:
            r.context.append("\n".join(texts).strip())
        if p.get("encrypted_content"):
            r.encrypted_reasoning += 1
    elif kind in ("function_call", "custom_tool_call"):
        name = str(p.get("name") or "tool")
        raw = p.get("arguments") if kind == "function_call" else p.get("input")
        args = parse_arguments(raw) if kind == "function_call" else raw
        r.call(str(p.get("call_id") or p.get("id") or ""), name, render_action(name, args), stamp)
    elif kind == "local_shell_call":
        action = object_field(p, "action")
        shell = _shell_text(action.get("command"))
        text = shell if shell is not None else render_action("local_shell", action)
        r.call(str(p.get("call_id") or p.get("id") or ""), "local_shell", text, stamp)
    elif kind == "web_search_call":
        action = object_field(p, "action")
        query = action.get("query")
        text = f"web_search {query}" if isinstance(query, str) else "web_search"
        call = r.call(str(p.get("id") or ""), "web_search", text, stamp)
        call.answered = True  # a hosted tool: the item is both the call and its completion
        call.observation = as_text(p.get("status") or "")
    elif kind in OUTPUT_ITEMS:
        r.output(str(p.get("call_id") or ""), p.get("output"))
    else:
        r.skip(f"response_item/{kind}")


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [
        c["text"]
        for c in (content if isinstance(content, list) else [])
        if isinstance(c, dict) and isinstance(c.get("text"), str)
    ]
    return "\n".join(parts)


# -- the trajectory ----------------------------------------------------------------------------


def trajectory_of(r: Rollout, lines: Lines, *, source: str) -> dict[str, Any]:
    sid = r.meta.get("session_id") or file_stem(source)
    turns = [
        new_turn(
            i,
            c.action,
            observation(c),
            thought=c.thought or None,
            timestamp=c.timestamp,
            actor="agent",
        )
        for i, c in enumerate(r.calls)
    ]
    meta: dict[str, Any] = {
        **r.meta,
        "session_id": sid,
        "records": len(lines.records),
        "tool_calls": len(r.calls),
        "unanswered_calls": sum(1 for c in r.calls if not c.answered),
        "failed_calls": sum(1 for c in r.calls if c.failed),
        "exit_codes": sum(1 for c in r.calls if c.exit_code is not None),
        "orphan_results": r.orphan_results or None,
        "compactions": r.compactions or None,
        "encrypted_reasoning": r.encrypted_reasoning or None,
        "skipped_records": dict(sorted(r.skipped.items())),
        "torn_last_line": lines.torn_last_line or None,
        "bad_lines": lines.bad_lines[:MAX_BAD_LINES] or None,
    }
    if r.final_text:
        meta["final_text"] = r.final_text[:FINAL_TEXT_CHARS]
    return new_trajectory(
        id=str(sid), task=r.task, source=source, format=FORMAT, turns=turns, metadata=meta
    )


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    """A rollout (the whole JSONL file, or a JSON array of its lines) → one trajectory."""
    lines = lines_of(obj)
    if lines is None:
        raise InputError(
            "a Codex rollout is a JSONL file of {timestamp, type, payload}", source=source
        )
    if not any(r.get("type") in LINE_TYPES for r in lines.records):
        raise InputError(
            f"Codex rollout holds no rollout line ({len(lines.records)} other records)",
            source=source,
        )
    return [trajectory_of(read_rollout(lines.records), lines, source=source)]


# -- detection ---------------------------------------------------------------------------------


def is_record(obj: Any) -> bool:
    """One line of a Codex CLI rollout: ``{"timestamp", "type", "payload": {...}}``."""
    return (
        isinstance(obj, dict)
        and obj.get("type") in LINE_TYPES
        and isinstance(obj.get("payload"), dict)
        and "timestamp" in obj
    )


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=one_or_array_of(is_record),
    shape="JSONL of Codex CLI rollout lines ({'timestamp', 'type': session_meta / "
    "turn_context / response_item / event_msg / compacted, 'payload'})",
    line=is_record,
    spans_lines=True,
)
