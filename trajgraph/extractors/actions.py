"""What an agent action *is*, for comparing actions across turns: canonical forms, read-only
commands, reverts, ``key=value`` fragments and pass/fail verdicts of result states.

Pure functions over text (no graph access): failure resolutions (extractors/resolutions.py),
the reminder rules and the brief (queries/memory/) and the replay evaluation's log oracle
(bench/remind_replay.py) share them.

Canonical form. Two actions are *the same* when their canonical forms are equal:

* a tool call ``name({...})`` (or a bare JSON object) is compared by its parsed arguments
  (key order and JSON spacing do not matter); a ``command`` argument is canonicalized as a
  shell command;
* a one-line shell command is tokenized like a shell does (quoting removed), ``2>&1`` and
  similar redirections of stderr are dropped, a leading ``cd DIR &&`` is dropped, trailing
  output filters (``| tail -20``, ``| head``, ``| grep x``) and marker prints between commands
  (``&& echo ---``) are dropped, ``VAR=value`` settings before a program count as flags (not
  positional arguments), combined short flags
  are split (``-rf`` = ``-r -f``), verbosity flags (``-q``, ``-v``, ``--tb=short``) are
  dropped and the remaining flags are sorted; positional arguments keep their order;
* anything else (edit blocks, heredocs, prose) is compared line by line, trailing spaces
  and blank lines ignored; indentation counts (it is often what a retry fixes).

*Near-identical* shell commands have the same positional arguments and a token similarity of
at least ``NEAR_IDENTICAL`` (they differ in a flag or two); edits and prose are never
near-identical, since one changed line is usually the point of a retry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Literal

from trajgraph.extractors import shell
from trajgraph.extractors.shell import STDERR_REDIRECT, TOOL_CALL, canonical_command

__all__ = ["canonical_command"]  # re-exported: the reminders and benches read it from here

NEAR_IDENTICAL = 0.75
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
# The command word lists this module reads are extractors/shell.py's.
_ASSIGNMENT = re.compile(
    r"""(?<![\w.-])["']?([A-Za-z_][\w.-]{0,48})["']?[ \t]*(?:=(?!=)|:(?!//))[ \t]*"""
    r"""["']?([^\s"',;)}\]\\/*]{1,120})"""
)
_FAIL = re.compile(
    r"\b(?:fail(?:ed|ure|ures|s)?|errors?|exceptions?|traceback|refused|denied|not found|"
    r"no such file|fatal|panic|aborted|invalid)\b|\w+Error\b|\w+Exception\b",
    re.IGNORECASE,
)
_PASS = re.compile(r"\b(?:pass(?:ed|es)?|ok|success(?:ful(?:ly)?)?|succeeded|done)\b", re.I)
# Error states of a read-only command are content it showed (a log, a grep hit), unless they
# say the command itself could not run.
COMMAND_FAILURE = re.compile(
    r"No such file|not found|Permission denied|cannot access|does not exist|Is a directory|"
    r"invalid option|unrecognized|illegal option|usage:|syntax error|cannot open|"
    r"^Command execution failed",  # Spider-agent's report of a command that did not run
    re.IGNORECASE,
)

Kind = Literal["empty", "shell", "call", "block"]


@dataclass(frozen=True)
class Canon:
    """An action in canonical form (see the module docstring)."""

    kind: Kind
    text: str
    tokens: tuple[str, ...] = ()  # shell: canonical tokens, operators included
    positional: tuple[str, ...] = ()  # shell: non-flag tokens in order
    words: tuple[str, ...] = ()  # shell: the command word of every segment
    tool: str = ""  # call: the tool's name

    @property
    def head(self) -> str:
        """What the action runs, for "did a later run of the same thing succeed": the first
        command and its first argument (``pytest tests/x.py``, ``python repro.py``), the tool
        of a call, or the first word of an edit block."""
        if self.kind == "shell" and self.positional:
            return " ".join(([self.tool] if self.tool else []) + list(self.positional[:2]))
        if self.kind == "call":
            return self.tool
        return self.text.split("\n", 1)[0].split(" ", 1)[0]


def first_line(action: str, limit: int = 120) -> str:
    """The action's first non-empty line, cut to ``limit`` characters (with an ellipsis)."""
    for line in (action or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
    return ""


# Canonical forms and verdicts are pure functions of the text, asked again and again for the
# same actions (every rule, every resolution, every hook call over a growing session).
_CACHE = 4096


@lru_cache(maxsize=_CACHE)
def canonical(action: str) -> Canon:
    text = (action or "").strip()
    if not text:
        return Canon("empty", "")
    call = TOOL_CALL.match(text)
    if call is not None:
        args = _json(call.group(2))
        if isinstance(args, dict):
            return _call_canon(call.group(1), args)
    if text[0] == "{":
        args = _json(text)
        if isinstance(args, dict):
            return _call_canon("", args)
    if "\n" not in text and not text.startswith(("<", "#")):
        shell = _shell(text)
        if shell is not None:
            return shell
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return Canon("block", "\n".join(lines))


def _json(raw: str) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _call_canon(tool: str, args: dict[str, object]) -> Canon:
    command = args.get("command") or args.get("cmd")
    if isinstance(command, str) and "\n" not in command.strip():
        shell = _shell(command.strip())
        if shell is not None:
            rest = {k: v for k, v in args.items() if k not in ("command", "cmd")}
            extra = json.dumps(rest, sort_keys=True, ensure_ascii=False) if rest else ""
            return Canon(
                "shell",
                f"{tool}: {shell.text}" + (f" {extra}" if extra else ""),
                shell.tokens + ((extra,) if extra else ()),
                shell.positional + ((extra,) if extra else ()),
                shell.words,
                tool,
            )
    body = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return Canon("call", f"{tool}({body})", tool=tool)


def _shell(line: str) -> Canon | None:
    tokens = shell.words(STDERR_REDIRECT.sub(" ", " " + line).strip())
    if not tokens:
        return None
    segments = shell.segments(tokens)
    while len(segments) > 1 and segments[0][1][0] == "cd" and segments[1][0] in ("&&", ";"):
        segments = [("", segments[1][1]), *segments[2:]]
    while (
        len(segments) > 1 and segments[-1][0] == "|" and segments[-1][1][0] in shell.OUTPUT_FILTERS
    ):
        segments.pop()
    segments = [
        (op, seg)
        for n, (op, seg) in enumerate(segments)
        if not (n and _is_marker(op, seg, segments[n + 1 : n + 2]))
    ]
    canon: list[str] = []
    positional: list[str] = []
    words: list[str] = []
    for op, seg in segments:
        if op:
            canon.append(op)
        flags: list[str] = []
        args: list[str] = []
        for tok in seg:
            if not args and shell.is_assignment(tok):
                flags.append(tok)  # VAR=value before the program: a setting, not an argument
            elif tok.startswith("-") and len(tok) > 1 and tok != "--" and not _NUMBER.match(tok):
                flags.extend(_split_flags(tok))
            elif (
                _NUMBER.match(tok) and flags and "=" not in flags[-1] and seg_prev_is_flag(seg, tok)
            ):
                flags[-1] = f"{flags[-1]}={tok}"  # -n 200, -A 5: the flag's value
            else:
                args.append(tok)
        flags = sorted(
            {
                f
                for f in flags
                if f not in shell.QUIET_FLAGS and not f.startswith(shell.QUIET_FLAG_PREFIXES)
            }
        )
        canon.extend([*args[:1], *flags, *args[1:]])
        positional.extend(args)
        if args:
            words.append(args[0].rsplit("/", 1)[-1])
    if not canon:
        return None
    return Canon("shell", " ".join(canon), tuple(canon), tuple(positional), tuple(words))


def _is_marker(op: str, seg: list[str], after: list[tuple[str, list[str]]]) -> bool:
    """``&& echo ---`` / ``; printf done``: a segment that only prints a marker between the
    commands that matter (no redirect, not piped into the next one)."""
    return (
        op in ("&&", ";")
        and seg[0] in ("echo", "printf")
        and not any(">" in t for t in seg)
        and not (after and after[0][0] == "|")
    )


def seg_prev_is_flag(seg: list[str], tok: str) -> bool:
    """``tok`` directly follows a flag token in ``seg``."""
    i = seg.index(tok)
    return i > 0 and seg[i - 1].startswith("-") and not _NUMBER.match(seg[i - 1])


def _split_flags(tok: str) -> list[str]:
    if tok.startswith("--") or "=" in tok or len(tok) <= 2 or not tok[1:].isalpha():
        return [tok]
    if len(tok) > 4:  # -name, -type, -print: find-style long options
        return [tok]
    return [f"-{c}" for c in tok[1:]]


def same_action(a: Canon, b: Canon) -> bool:
    return a.kind != "empty" and a.kind == b.kind and a.text == b.text


def similarity(a: Canon, b: Canon) -> float:
    """1.0 for the same action; for two shell commands with the same positional arguments
    their token similarity; 0.0 otherwise (edits, calls and prose must be the same)."""
    if same_action(a, b):
        return 1.0
    if a.kind != "shell" or b.kind != "shell" or a.positional != b.positional:
        return 0.0
    return SequenceMatcher(None, a.tokens, b.tokens, autojunk=False).ratio()


def near_identical(a: Canon, b: Canon) -> bool:
    return similarity(a, b) >= NEAR_IDENTICAL


# -- what an action does -------------------------------------------------------------------------


@lru_cache(maxsize=_CACHE)
def is_read_only(action: str, *, checks: bool = True) -> bool:
    """The action only looks at things (reads, listings, searches, status) or, with
    ``checks``, re-checks them (test runs, linters, checksums), so it cannot be why a
    repeated command would now behave differently. Unknown commands, edits, writes, chat
    messages and tool calls that are not lookups are not read-only."""
    c = canonical(action)
    if c.kind == "empty":
        return True
    if c.kind == "call":
        return _read_only_tool(c.tool)
    if c.kind == "block":
        return False
    if c.tool and not _read_only_tool(c.tool) and not c.tool.startswith("execute"):
        return False
    if shell.WRITE_REDIRECT.search(STDERR_REDIRECT.sub(" ", action)) or shell.SED_IN_PLACE.search(
        action
    ):
        return False
    tokens = shell.words(STDERR_REDIRECT.sub(" ", " " + canonical_command(action)).strip())
    for _, seg in shell.segments(tokens):
        args = [t for t in seg if not t.startswith("-")]
        word = args[0].rsplit("/", 1)[-1] if args else ""
        if word == "git":
            if len(args) < 2 or args[1] not in shell.READ_ONLY_GIT:
                return False
        elif not (word in shell.READ_ONLY_COMMANDS or (checks and _is_check(word, args))) or (
            word == "find" and ("-delete" in seg or "-exec" in seg)
        ):
            return False
    return True


def _is_check(word: str, args: list[str]) -> bool:
    """A test run or a checksum: ``pytest``, ``npm test``, ``python -m pytest``,
    ``python tests/runtests.py``, ``sha256sum``."""
    if word in shell.CHECK_COMMANDS:
        return True
    rest = args[1:]
    if word in shell.TEST_SUBCOMMAND_TOOLS:
        return bool(rest) and rest[0] in shell.TEST_SUBCOMMANDS
    if word.startswith("python"):
        module = rest[0] if rest else ""
        return module in shell.TEST_MODULES or bool(shell.TEST_SCRIPT.search(module))
    return False


def _read_only_tool(tool: str) -> bool:
    return tool in shell.READ_ONLY_CALLS or tool.startswith(shell.READ_ONLY_CALL_PREFIXES)


def shell_words(action: str) -> list[list[str]]:
    """The token lists of every segment of the action's first command line."""
    line = canonical_command(action).split("\n", 1)[0]
    tokens = shell.words(STDERR_REDIRECT.sub(" ", " " + line).strip())
    return [seg for _, seg in shell.segments(tokens)]


@dataclass(frozen=True)
class Revert:
    """An action that throws away changes: to these paths, or to every file (``all_files``)."""

    paths: tuple[str, ...]
    all_files: bool
    how: str  # the command, for the message


def revert_of(action: str) -> Revert | None:
    """``git checkout -- F``, ``git restore F``, ``git stash``, ``git reset --hard``,
    ``git checkout .``, ``rm F``, ``undo_edit F``, ``mv/cp BACKUP F``; None otherwise."""
    first = first_line(canonical_command(action), 200)
    words = [*first.split(None, 2), "", ""][:2]
    if words[0] == "undo_edit" and words[1]:
        return Revert((words[1],), False, first)
    for seg in shell_words(action):
        args = [t for t in seg if not t.startswith("-")]
        flags = {t for t in seg if t.startswith("-")}
        word = args[0].rsplit("/", 1)[-1] if args else ""
        if word == "git" and len(args) >= 2:
            sub, rest = args[1], [a for a in args[2:] if a != "HEAD" and not a.startswith("HEAD")]
            if sub == "stash" and (not rest or rest[0] in ("push", "save")):
                return Revert((), True, first)
            if sub == "reset" and "--hard" in flags:
                return Revert((), True, first)
            if sub == "restore" and "--staged" in flags and "--worktree" not in flags:
                continue  # unstaging keeps the working copy
            if sub in ("checkout", "restore") and rest:
                if rest in (["."], ["--", "."]) or "." in rest:
                    return Revert((), True, first)
                paths = tuple(a for a in rest if a != "--")
                if paths and ("--" in seg or sub == "restore" or all("." in p for p in paths)):
                    return Revert(paths, False, first)
        if word == "rm" and len(args) >= 2:
            return Revert(tuple(args[1:]), False, first)
        if word in ("mv", "cp") and len(args) == 3:
            src, dst = args[1], args[2]
            if src.endswith((".bak", ".orig", ".backup", "~")) or dst in src:
                return Revert((dst,), False, first)
    return None


def writes_path(action: str, path: str) -> bool:
    """The action creates or writes ``path`` (an edit tool, a redirect, tee, touch, sed -i)."""
    text = canonical_command(action)
    words = first_line(text, 400).split()
    if words and words[0] in shell.EDIT_TOOLS and words[0] != "undo_edit":
        return any(same_path(w, path) for w in words[1:3]) or (path in text and '"path"' in action)
    for m in shell.WRITE_REDIRECT.finditer(STDERR_REDIRECT.sub(" ", text)):
        if same_path(m.group(1), path):
            return True
    for seg in shell_words(action):
        word = seg[0].rsplit("/", 1)[-1] if seg else ""
        if word in ("touch", "tee", "cp", "mv") and seg and same_path(seg[-1], path):
            return True
        if shell.sed_in_place(seg) and same_path(seg[-1], path):
            return True
    return False


def same_path(a: str, b: str) -> bool:
    """The same file, allowing one side to be relative (``x/y.py`` ~ ``/repo/x/y.py``)."""
    a, b = a.strip("'\"").rstrip("/"), b.strip("'\"").rstrip("/")
    if not a or not b:
        return False
    a, b = a.removeprefix("./"), b.removeprefix("./")
    if a == b:
        return True
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return long_.endswith("/" + short)


def mentions_path(text: str, path: str) -> bool:
    """``path``, or a tail of it that names a file (``x/y.py``, ``y.py``), occurs in ``text``
    as a whole path."""
    path = path.strip().rstrip("/").removeprefix("./")
    if len(path) < 3:
        return False
    parts = path.lstrip("/").split("/")
    tails = {"/".join(parts[i:]) for i in range(len(parts))}
    tails = {t for t in tails if len(t) >= 3 and ("/" in t or "." in t)}
    for tail in sorted(tails, key=len, reverse=True):
        for m in re.finditer(re.escape(tail), text):
            before = text[m.start() - 1] if m.start() else " "
            after = text[m.end()] if m.end() < len(text) else " "
            if not (before.isalnum() or before in "_.-") and not (
                after.isalnum() or after in "_-/"
            ):
                return True
    return False


def assignments(text: str) -> list[tuple[str, str]]:
    """``key=value`` / ``key: value`` / ``"key": "value"`` pairs in ``text``, verbatim."""
    return [
        (m.group(1), m.group(2))
        for m in _ASSIGNMENT.finditer(text or "")
        if any(c.isalnum() for c in m.group(2))
    ]


def _call_pairs(action: str) -> list[tuple[str, str]]:
    """Scalar ``key: value`` pairs of a tool call's JSON arguments, nested ones included."""
    call = TOOL_CALL.match((action or "").strip())
    args = _json(call.group(2)) if call else None
    out: list[tuple[str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                    out.append((str(k), str(v)))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(args)
    return out


def used_values(action: str) -> list[tuple[str, str]]:
    """``(key, value)`` pairs the action relies on: every pair of a read-only command or
    lookup, and the search side of a write (``sed 's/port = 9090/port = 8000/'`` uses
    ``port = 9090``: the last pair per key of a write is what it sets)."""
    c = canonical(action)
    if c.kind == "shell":
        pairs = assignments(canonical_command(action))
        if is_read_only(action):
            return pairs
        last = {k: i for i, (k, _) in enumerate(pairs)}
        return [p for i, p in enumerate(pairs) if last[p[0]] != i]
    if c.kind == "call" and _read_only_tool(c.tool):
        return _call_pairs(action)
    return []


def set_values(action: str) -> list[tuple[str, str]]:
    """``(key, value)`` pairs the action sets: the last pair per key of a shell write, every
    argument of a tool call that is not a lookup."""
    c = canonical(action)
    if c.kind == "shell" and not is_read_only(action):
        return list(dict(assignments(canonical_command(action))).items())
    if c.kind == "call" and not _read_only_tool(c.tool):
        return _call_pairs(action)
    return []


# -- pass or fail --------------------------------------------------------------------------------


def verdict(kind: str, value: str) -> Literal["pass", "fail"] | None:
    """Whether a result state says the run passed or failed; None when it says neither."""
    value = value or ""
    if kind == "exit_code":
        return "pass" if value.strip() == "0" else "fail"
    if kind == "error":
        return "fail"
    if kind in ("status", "other", "value"):
        if _FAIL.search(value):
            return "fail"
        if _PASS.search(value):
            return "pass"
    return None
