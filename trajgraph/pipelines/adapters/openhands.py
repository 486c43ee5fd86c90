"""OpenHands event streams: a JSON array of events (or an eval-output object whose
``history`` holds them).

Every action event by the agent or the user is one turn, in stream order, except:

* the first user ``message`` is the task, not a turn;
* bookkeeping actions (``change_agent_state``, ``system`` prompt, ``recall`` of microagent
  knowledge) are skipped: they are the harness talking to itself, not a decision.

An observation joins the action whose ``id`` equals its ``cause``; several observations of
one action are joined with newlines, and an action that got none has observation ``""``.
Observations without a matching turn (agent state changes, ``null`` placeholders of skipped
actions) are dropped. The observation text is what the agent was shown: the event
``content`` framed by the command prefix/suffix OpenHands adds (exit code notes), or, for
ACI file edits, ``formatted_output_and_error`` instead of the UI diff.
"""

from __future__ import annotations

import json
from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat, parse_json
from trajgraph.pipelines.adapters.canonical import (
    as_text,
    field,
    file_stem,
    new_trajectory,
    new_turn,
)

FORMAT = "openhands"

_SKIPPED_ACTIONS = frozenset({"change_agent_state", "system", "recall"})


def _tool_args(event: dict[str, Any]) -> dict[str, Any]:
    """Arguments of the LLM tool call that produced ``event`` (OpenHands sometimes leaves the
    edit body only there), decoded from the model response; {} when absent or not JSON."""
    meta = event.get("tool_call_metadata")
    if not isinstance(meta, dict):
        return {}
    response = meta.get("model_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict) or call.get("id") != meta.get("tool_call_id"):
                continue
            fn = field(call, "function")
            try:
                args = parse_json(fn.get("arguments") or "{}")  # untrusted text, like the log
            except (TypeError, ValueError):
                return {}
            return args if isinstance(args, dict) else {}
    return {}


def _render_edit(args: dict[str, Any], event: dict[str, Any]) -> str:
    tool = _tool_args(event)

    def pick(key: str) -> Any:
        value = args.get(key)
        return value if value not in (None, "") else tool.get(key)

    command = pick("command") or "edit"
    head = f"{command} {pick('path') or ''}".rstrip()
    body: list[str] = []
    if pick("file_text") is not None:
        body.append(as_text(pick("file_text")))
    if pick("old_str") is not None:
        body.append(f"<old_str>\n{as_text(pick('old_str'))}\n</old_str>")
    if pick("insert_line") is not None:
        body.append(f"<insert_line>{pick('insert_line')}</insert_line>")
    if pick("new_str") is not None:
        body.append(f"<new_str>\n{as_text(pick('new_str'))}\n</new_str>")
    if args.get("content"):
        body.append(as_text(args["content"]))
    if not body and args.get("translated_ipython_code"):
        body.append(as_text(args["translated_ipython_code"]))
    return "\n".join([head, *body])


def render_action(event: dict[str, Any]) -> str:
    """The action as text: the command or content itself where there is one, else
    ``<action> <compact JSON of args>``."""
    kind = str(event.get("action"))
    args = field(event, "args")
    if kind == "run" and "command" in args:
        return as_text(args["command"])
    if kind == "run_ipython" and "code" in args:
        return as_text(args["code"])
    if kind == "edit":
        return _render_edit(args, event)
    if kind == "write":
        return f"write {as_text(args.get('path'))}\n{as_text(args.get('content'))}"
    if kind == "read":
        return f"read {as_text(args.get('path'))}"
    if kind == "browse" and "url" in args:
        return f"browse {as_text(args['url'])}"
    if kind == "browse_interactive" and "browser_actions" in args:
        return as_text(args["browser_actions"])
    if kind == "message" and "content" in args:
        return as_text(args["content"])
    if kind == "think" and args.get("thought"):
        return as_text(args["thought"])
    if kind == "finish":
        final = args.get("final_thought") or args.get("outputs") or event.get("message")
        return as_text(final)
    rest = {k: v for k, v in args.items() if k != "thought"}
    return f"{kind} {json.dumps(rest, ensure_ascii=False, separators=(',', ':'))}"


def observation_text(event: dict[str, Any]) -> str:
    extras = field(event, "extras")
    if extras.get("impl_source") == "oh_aci" and isinstance(
        extras.get("formatted_output_and_error"), str
    ):
        return str(extras["formatted_output_and_error"])
    content = as_text(event.get("content"))
    meta = extras.get("metadata")
    if isinstance(meta, dict):
        return f"{as_text(meta.get('prefix'))}{content}{as_text(meta.get('suffix'))}"
    return content


def _events(obj: Any, source: str) -> list[dict[str, Any]]:
    events = obj.get("history") if isinstance(obj, dict) else obj
    if not isinstance(events, list):
        raise InputError("OpenHands log needs a list of events", source=source)
    return [e for e in events if isinstance(e, dict)]


def _model(events: list[dict[str, Any]]) -> str | None:
    for event in events:
        meta = event.get("tool_call_metadata")
        response = meta.get("model_response") if isinstance(meta, dict) else None
        if isinstance(response, dict) and response.get("model"):
            return str(response["model"])
    return None


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    events = _events(obj, source)
    task: str | None = None
    turns: list[dict[str, Any]] = []
    by_id: dict[Any, dict[str, Any]] = {}
    agent_state: str | None = None
    skipped = 0
    for event in events:
        if "action" in event:
            kind = event.get("action")
            actor = str(event.get("source") or "agent")
            if kind in _SKIPPED_ACTIONS or actor == "environment":
                skipped += 1
                continue
            if kind == "message" and actor == "user" and task is None:
                args = field(event, "args")
                task = as_text(args.get("content", event.get("message")))
                continue
            args = field(event, "args")
            thought = as_text(args.get("thought")).strip() if kind != "think" else ""
            turn = new_turn(
                len(turns),
                render_action(event),
                "",
                thought=thought or None,
                timestamp=as_text(event.get("timestamp")) or None,
                actor=actor,
            )
            turns.append(turn)
            if event.get("id") is not None:
                by_id[event["id"]] = turn
        elif "observation" in event:
            extras = field(event, "extras")
            if event.get("observation") == "agent_state_changed":
                agent_state = as_text(extras.get("agent_state")) or agent_state
            target = by_id.get(event.get("cause"))
            if target is None or event.get("observation") == "null":
                continue
            text = observation_text(event)
            prev = target["observation"]
            target["observation"] = f"{prev}\n{text}" if prev else text
    wrapper = obj if isinstance(obj, dict) else {}
    instruction = wrapper.get("instruction")
    if task is None and isinstance(instruction, str):
        task = instruction
    metadata = {
        "model": _model(events),
        "events": len(events),
        "skipped_actions": skipped,
        "final_agent_state": agent_state,
        "instance_id": wrapper.get("instance_id"),
    }
    return [
        new_trajectory(
            id=str(wrapper.get("instance_id") or file_stem(source)),
            task=task or "",
            source=source,
            format=FORMAT,
            turns=turns,
            outcome=agent_state,
            metadata=metadata,
        )
    ]


def _is_event(value: Any) -> bool:
    return isinstance(value, dict) and ("action" in value or "observation" in value)


def fits(obj: Any) -> bool:
    if isinstance(obj, list):
        return bool(obj) and all(_is_event(e) for e in obj[:20]) and _is_event(obj[-1])
    if isinstance(obj, dict):
        history = obj.get("history")
        return (
            isinstance(history, list) and bool(history) and all(_is_event(e) for e in history[:20])
        )
    return False


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=fits,
    shape="array of events with 'action'/'observation' (or object with such 'history')",
)
