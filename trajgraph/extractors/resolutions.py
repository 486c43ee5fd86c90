"""Resolutions: what an agent did between a failure and the first re-run that got past it.

Pure functions over one trajectory's turns and the error signatures of their observations
(extractors/signatures.py); graph/rows.py turns the result into ``Resolution`` nodes, and
queries/lessons/ reads them across trajectories.

For every signature a turn shows, an **episode** starts at that turn and follows the command
that failed (its canonical head, queries/memory/actions.py: ``python3 reproduce_issue.py``).
A later turn that runs the same command, or its **successor** (the same program running a
script written after the failure), is a re-run:

* if the re-run shows the signature again, the steps since the previous failing run are
  **attempts that did not help**;
* if it does not, the episode is **resolved** at that turn, and the steps since the last
  failing run are the **resolution**.

Steps are the turns in between that change something (not read-only: edits, installs,
``mkdir``, other commands), with the verbatim action. An episode that no re-run got past
by the end of the trajectory is **unresolved**; ``retried`` says whether the command was
run again at all.

Each step has a **key action** for comparing steps across runs (the same fix in two runs
reads differently: other file names, other values): an edit is ``edit the failing script``,
``edit a new file`` (one the agent created in this run) or ``edit PATH`` (a file of the code
base, which every run shares), with the salient code tokens of the lines it changed
(dotted names and calls: ``settings.configure``, ``django.setup``); a command is its
canonical form with the agent's own files as ``<new file>`` (``mkdir <new file>``,
``pip install psycopg2``). Two steps **share their key action** when the keys are equal and,
for edits, they share a salient token or neither has any.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from trajgraph.extractors import shell
from trajgraph.extractors.actions import (
    COMMAND_FAILURE,
    canonical,
    first_line,
    is_read_only,
    same_path,
)
from trajgraph.extractors.shell import command_segments, heredoc_writes

__all__ = ["command_segments", "heredoc_writes"]  # re-exported: the shell grammar's, used here

# Bump when episodes, steps or key actions change: stored resolutions are rewritten then.
RESOLUTION_VERSION = 1
MAX_STEPS = 8  # steps kept per resolution or attempt (the latest ones)
MAX_TOKENS = 12  # salient tokens kept per step
MAX_KEY_CHARS = 160

_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w])")
_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_GENERIC_WORDS = (
    "print len str int float bool range open super isinstance format append get join split "
    "strip items keys values list dict set tuple type getattr setattr hasattr main test run "
    "exit sorted min max sum any all map filter zip enumerate repr input lambda if for while "
    "return not and or in is def class import from with as try except finally raise assert "
    "os.path os.path.join os.environ sys.path sys.exit sys.argv e.g i.e self.assertEqual "
    "self.assertTrue self.assertFalse self.assertIn"
)
_GENERIC_TOKENS = frozenset(_GENERIC_WORDS.split())
_FILE_NAME = re.compile(r"\.(?:py|txt|json|ya?ml|toml|ini|cfg|md|rst|html|js|ts|sh|sql|log)$")


@dataclass(frozen=True)
class TurnFacts:
    """What resolutions need of one turn: its action, the signatures its observation shows
    (error states that are failures, not content a viewer printed) and the files it wrote."""

    turn: int
    action: str
    signatures: tuple[str, ...] = ()
    written: tuple[str, ...] = ()


@dataclass(frozen=True)
class Key:
    """One key action: ``edit …`` with the salient tokens of the changed lines, or a
    command in canonical form."""

    key: str
    tokens: tuple[str, ...] = ()

    def text(self) -> str:
        return self.key + (f" ({', '.join(self.tokens)})" if self.tokens else "")


@dataclass(frozen=True)
class Step:
    turn: int
    keys: tuple[Key, ...]


@dataclass
class Episode:
    signature: str
    command: str  # first line of the failing action, verbatim
    failed_turns: list[int]
    resolved_turn: int | None = None
    steps: list[Step] = field(default_factory=list)  # the resolution
    attempts: list[list[Step]] = field(default_factory=list)  # each followed by the failure
    retried: bool = False
    heads: tuple[str, ...] = ()
    script: str = ""
    action: str = ""  # the failing action
    pending: list[Step] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return self.resolved_turn is not None

    @property
    def outcome(self) -> str:
        return "resolved" if self.resolved else "unresolved"


def is_failure_error(action: str, error: str, exit_codes: Iterable[str] = ()) -> bool:
    """An error state is a failure unless a viewer (cat, grep, ls …) printed it as content:
    a viewer's error counts only when it says the viewer could not run (as
    ``TurnRecord.failed``) and no exit code 0 says otherwise."""
    if not is_read_only(action, checks=False):
        return True
    codes = [c.strip() for c in exit_codes]
    return bool(COMMAND_FAILURE.search(error)) and not (codes and all(c == "0" for c in codes))


def episodes(turns: Sequence[TurnFacts]) -> list[Episode]:
    """Every episode of the trajectory, in order of their first failing turn."""
    ordered = sorted(turns, key=lambda t: t.turn)
    created = _created_paths(ordered)
    contents: dict[str, str] = {}  # path → last full content an action wrote
    open_: list[Episode] = []
    done: list[Episode] = []
    for facts in ordered:
        rerun_of = [e for e in open_ if _reruns(e, facts, created)]
        for e in rerun_of:
            e.retried = True
            if e.signature in facts.signatures:
                if e.pending:
                    e.attempts.append(e.pending[-MAX_STEPS:])
                e.pending = []
                e.failed_turns.append(facts.turn)
            else:
                e.resolved_turn = facts.turn
                changed = _changed_command(e, facts, created, contents)
                e.steps = [*e.pending, *([changed] if changed else [])][-MAX_STEPS:]
                e.pending = []
                open_.remove(e)
                done.append(e)
        if not is_read_only(facts.action):
            for e in open_:
                if e not in rerun_of:
                    e.pending.append(step_of(facts, e.script, created, contents))
        _remember_contents(facts, contents)
        for sig in facts.signatures:
            if any(e.signature == sig and e in rerun_of for e in open_):
                continue
            open_.append(
                Episode(
                    signature=sig,
                    command=first_line(facts.action, 200),
                    failed_turns=[facts.turn],
                    heads=tuple(run_heads(facts.action)),
                    script=_script(facts.action),
                    action=facts.action,
                )
            )
    for e in open_:
        e.pending = []  # not followed by the failure: nothing says they did not help
    everything = done + open_
    return sorted(everything, key=lambda e: (e.failed_turns[0], e.signature))


def turn_steps(turns: Sequence[TurnFacts]) -> dict[int, Step]:
    """The key actions of every turn that changes something, each read as a step after the
    latest earlier failure of the run (whose script is "the failing script"): how a turn
    found by other means (a text search) compares with a resolution."""
    ordered = sorted(turns, key=lambda t: t.turn)
    created = _created_paths(ordered)
    contents: dict[str, str] = {}
    failing_script = ""
    out: dict[int, Step] = {}
    for facts in ordered:
        if not is_read_only(facts.action):
            out[facts.turn] = step_of(facts, failing_script, created, contents)
        _remember_contents(facts, contents)
        if facts.signatures:
            failing_script = _script(facts.action) or failing_script
    return out


def _reruns(e: Episode, facts: TurnFacts, created: dict[str, int]) -> bool:
    """``facts`` runs the episode's command again, or its successor."""
    if facts.turn <= e.failed_turns[-1]:
        return False
    heads = run_heads(facts.action)
    if set(heads) & set(e.heads):
        return True
    runners = {_runner(h) for h in e.heads} - {""}
    return any(
        script
        and _runner(head) in runners
        and script != e.script
        and e.failed_turns[0] <= created.get(script, -1) < facts.turn
        for head in heads
        for script in [_script_of_head(head)]
    )


def _changed_command(
    e: Episode, facts: TurnFacts, created: dict[str, int], contents: dict[str, str]
) -> Step | None:
    """A re-run that is not the failing action verbatim carries a change that is part of what
    got past the failure: other ``python -c`` code, an environment variable set on the way,
    a script rewritten in the same action."""
    if e.action.strip() == facts.action.strip():
        return None
    if any(h.endswith(" -c") for h in run_heads(facts.action)):
        old = [line.strip() for line in e.action.splitlines() if line.strip()]
        new = [line.strip() for line in facts.action.splitlines() if line.strip()]
        tokens = salient_tokens(_moved_or_changed(old, new))
        return Step(facts.turn, (Key("edit the failing script", tokens),))
    before = step_of(TurnFacts(facts.turn, e.action), e.script, created, {}, skip_heads=e.heads)
    step = step_of(facts, e.script, created, contents, skip_heads=e.heads)
    keys = tuple(k for k in step.keys if k.tokens or k not in before.keys)
    return Step(facts.turn, keys) if keys else None


def run_heads(action: str) -> list[str]:
    """What the action runs, one head per command (``python repro.py``, ``pytest tests/x.py``,
    ``python -c`` for inline code): environment assignments, ``cd`` and ``export`` and the
    writing of files (heredocs, redirects) left out. A tool call is its tool."""
    return list(_run_heads_of(action))


@lru_cache(maxsize=4096)
def _run_heads_of(action: str) -> tuple[str, ...]:
    canon = canonical(action)
    if canon.kind in ("call", "empty"):
        return (canon.head,) if canon.head else ()
    heads = []
    for seg in command_segments(action):
        while seg and shell.is_assignment(seg[0]):
            seg = seg[1:]
        if not seg:
            continue
        word = shell.program(seg[0])
        if word in shell.QUIET_COMMANDS or word in shell.FILE_COMMANDS or word in ("export", "set"):
            continue
        if shell.is_file_write(seg):
            continue
        if _runner(word) and "-c" in seg[1:]:
            heads.append(f"{word} -c")
            continue
        head = canonical(shlex.join([word, *seg[1:]])).head
        if head:
            heads.append(head)
    return tuple(heads)


def _script_of_head(head: str) -> str:
    parts = head.split(" ")
    if len(parts) < 2 or not _runner(parts[0]):
        return ""
    arg = parts[1]
    return arg if "." in arg.rsplit("/", 1)[-1] and shell.PATHISH.match(arg) else ""


def _runner(head: str) -> str:
    word = shell.program(head.split(" ", 1)[0]) if head else ""
    return word if shell.is_interpreter(word) else ""


def _script(action: str) -> str:
    """The script the action runs (``python x.py``, ``node x.js``), or ''."""
    for head in reversed(run_heads(action)):
        script = _script_of_head(head)
        if script:
            return script
    return ""


def _created_paths(turns: Iterable[TurnFacts]) -> dict[str, int]:
    """Paths the agent created in this run (first written by a full write, not an in-place
    edit), with the turn that created them."""
    created: dict[str, int] = {}
    seen: set[str] = set()
    for facts in turns:
        in_place = shell.is_in_place_edit(first_line(facts.action, 400))
        made = [p for p, _ in heredoc_writes(facts.action)]
        for seg in (
            command_segments(facts.action)
            if "mkdir" in facts.action or "touch" in facts.action
            else []
        ):
            if seg[0].rsplit("/", 1)[-1] in ("mkdir", "touch"):
                made.extend(a for a in seg[1:] if not a.startswith("-"))
        for path in dict.fromkeys([*facts.written, *made]):
            if path in seen:
                continue
            seen.add(path)
            if not in_place:
                created[path] = facts.turn
    return created


def _remember_contents(facts: TurnFacts, contents: dict[str, str]) -> None:
    for path, body in heredoc_writes(facts.action):
        contents[path] = body


def step_of(
    facts: TurnFacts,
    failing_script: str,
    created: dict[str, int],
    contents: dict[str, str],
    *,
    skip_heads: tuple[str, ...] = (),
) -> Step:
    """The key actions of one step (see the module docstring): one per command it runs that
    changes something (environment assignments as ``set NAME=value``), and one for the files
    it edits. Commands whose run head is in ``skip_heads`` (the re-run itself) are left out."""
    keys: list[Key] = []
    file_targets: list[str] = []
    for seg in command_segments(facts.action):
        while seg and shell.is_assignment(seg[0]):
            keys.append(Key(f"set {seg[0]}"))
            seg = seg[1:]
        if not seg:
            continue
        word = shell.program(seg[0])
        if word in ("export", "set"):
            keys.extend(Key(f"set {a}") for a in seg[1:] if shell.is_assignment(a))
        elif word in shell.FILE_COMMANDS:
            args = [a for a in seg[1:] if not a.startswith("-")]
            file_targets.extend(args)
            keys.append(Key(_command_key(seg, created, new=word in ("mkdir", "touch"))))
        elif skip_heads and set(run_heads(shlex.join(seg))) & set(skip_heads):
            continue
        elif _runner(word) and "-c" in seg[1:-1]:
            code = seg[seg.index("-c") + 1]
            keys.append(Key("run inline code", salient_tokens(code.splitlines())))
        elif word in shell.EDIT_WORDS or word in shell.QUIET_COMMANDS or shell.is_test_word(word):
            continue  # edits are keyed by the files they wrote; test runs change nothing
        elif not is_read_only(" ".join(seg)):
            keys.append(Key(_command_key(seg, created)))
    written = [*facts.written, *(p for p, _ in heredoc_writes(facts.action))]
    edited = [p for p in dict.fromkeys(written) if not any(same_path(p, t) for t in file_targets)]
    if edited:
        roles = sorted({_role(p, failing_script, created) for p in edited})
        key = ("edit " + ", ".join(roles))[:MAX_KEY_CHARS]
        keys.append(Key(key, _edit_tokens(facts.action, contents)))
    if not keys and not skip_heads:  # a step nothing above describes (a tool call, prose)
        keys.append(Key(first_line(facts.action, MAX_KEY_CHARS)))
    return Step(facts.turn, tuple(dict.fromkeys(keys)))


def _role(path: str, failing_script: str, created: dict[str, int]) -> str:
    if failing_script and same_path(path, failing_script):
        return "the failing script"
    if any(same_path(path, c) for c in created):
        return "a new file"
    return path


def _command_key(seg: list[str], created: dict[str, int], *, new: bool = False) -> str:
    """The command with flags left out and the agent's own files (or, for ``mkdir`` and
    ``touch``, every path: they are new) as ``<new file>``."""
    out: list[str] = []
    for tok in seg:
        if tok.startswith("-") and len(tok) > 1:
            continue  # flags: -p, -rf say how, not what
        if out and shell.PATHISH.match(tok) and (new or any(same_path(tok, c) for c in created)):
            out.append("<new file>")
        else:
            out.append(tok)
    return " ".join(out)[:MAX_KEY_CHARS]


def _edit_tokens(action: str, contents: dict[str, str]) -> tuple[str, ...]:
    """Salient code tokens of the lines the edit changed (for a rewrite of a file written
    before: the lines added or removed, so moved lines count; for sed: both sides)."""
    changed: list[str] = []
    writes = heredoc_writes(action)
    if writes:
        for path, body in writes:
            old = contents.get(path)
            new_lines = [line.strip() for line in body.splitlines() if line.strip()]
            if old is None:
                changed.extend(new_lines)
                continue
            old_lines = [line.strip() for line in old.splitlines() if line.strip()]
            changed.extend(_moved_or_changed(old_lines, new_lines))
    else:
        for m in shell.SED_SUBST.finditer(action):
            changed.extend([m.group(2), m.group(3)])
        if not changed:
            changed = action.splitlines()[1:] or action.splitlines()
    return salient_tokens(changed)


def _moved_or_changed(old: list[str], new: list[str]) -> list[str]:
    """Lines added or removed, and lines whose order relative to the others changed."""
    from difflib import SequenceMatcher

    out: list[str] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            out.extend(old[i1:i2])
            out.extend(new[j1:j2])
    return out


def salient_tokens(lines: Iterable[str]) -> tuple[str, ...]:
    """Dotted names and called names in code lines, first occurrence first, generic ones
    (print, len, os.path …) and comments left out."""
    seen: dict[str, None] = {}
    for line in lines:
        code = line.split("#", 1)[0]
        for m in (*_DOTTED.finditer(code), *_CALL.finditer(code)):
            tok = m.group(1)
            if (
                tok in _GENERIC_TOKENS
                or tok.startswith("self.")
                or len(tok) < 3
                or _FILE_NAME.search(tok)
            ):
                continue
            seen.setdefault(tok, None)
            if len(seen) >= MAX_TOKENS:
                return tuple(seen)
    return tuple(seen)


def same_key(a: Key, b: Key) -> bool:
    """Two key actions (of two runs) do the same thing (see the module docstring)."""
    if a.key != b.key:
        return False
    if not a.tokens or not b.tokens:
        return not a.tokens and not b.tokens
    # By last component (call_command ~ django.core.management.call_command), and most of
    # the smaller side shared: one common import in two long rewrites is not the same fix.
    x = {t.rsplit(".", 1)[-1] for t in a.tokens}
    y = {t.rsplit(".", 1)[-1] for t in b.tokens}
    return len(x & y) * 2 >= min(len(x), len(y))


def share_key_action(a: Iterable[Key], b: Iterable[Key]) -> bool:
    """Some key action of ``a`` is one of ``b``."""
    bs = list(b)
    return any(same_key(x, y) for x in a for y in bs)
