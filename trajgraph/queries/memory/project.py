"""Memory across sessions of one project: what earlier sessions in the same place learned.

A **project** is a folder: the git root of a path when the path is inside a work tree on this
machine, else the path itself. A session belongs to it when its logged working directory
(``metadata.cwd``, Claude Code and Codex both record it) is that folder or inside it, in the
same tenant. The memory is three kinds of items, each citing sessions and turns:

* **recurring failures**: a failure signature (extractors/signatures.py) that failed at least
  twice (``min_failures``) in the project's sessions, the error verbatim, and what got past
  it (the step of a resolved episode, or the re-run) or that nothing did;
* **commands that never worked here**: a command (canonical form, flags kept) whose every run
  in the project failed;
* **files whose edits broke things**: a ``file_changed`` state with a ``CAUSES`` edge to a
  failure (the graph's edit → later result edges).

Items are ranked (sessions, then failures) and taken round-robin by kind while the rendered
text fits the token budget; no item, no text: silence. With a ``prompt`` (a hook's
UserPromptSubmit), only items sharing a word with the prompt are kept.

The Cypher is here, beside its reader; values are parameters only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import neo4j

from trajgraph.core.tokens import check_budget, count_tokens
from trajgraph.extractors import shell
from trajgraph.extractors.actions import first_line, is_read_only
from trajgraph.graph.connection import graph_errors, run_read
from trajgraph.queries.memory.store import QUERY_TIMEOUT_S, Result, TurnRecord

DEFAULT_BUDGET = 300
MIN_BUDGET = 40
MAX_BUDGET = 4000
MAX_SESSIONS = 50  # the project's sessions read (most turns first)
ACTION_CHARS = 2000
TAIL = 600  # the observation's end: its last line says a failure no error line names
ERROR_CHARS = 160
COMMAND_CHARS = 90
HEAD = "trajgraph memory of earlier sessions in this project"
Kind = Literal["recurring_failure", "never_worked", "risky_file"]
KINDS: tuple[Kind, ...] = ("recurring_failure", "never_worked", "risky_file")

# The tenant's trajectories whose metadata names a working directory starting with the
# project folder (a cheap text prefilter; Python keeps the ones inside the folder).
PROJECT_TRAJECTORIES = """
MATCH (t:Trajectory {tenant: $tenant})
WHERE t.metadata CONTAINS $needle
RETURN t.id AS id, t.uid AS uid, t.metadata AS metadata, t.format AS format,
       t.turn_count AS turns
ORDER BY turns DESC, id
"""

# Every turn of the sessions, with the result states the failure rules read and the
# signatures of its failures.
PROJECT_TURNS = """
UNWIND $tuids AS tuid
MATCH (t:Turn {trajectory_uid: tuid})
RETURN t.trajectory_id AS trajectory, t.idx AS turn, left(t.action, $action_chars) AS action,
       right(t.observation, $tail_chars) AS tail,
       COLLECT {
         MATCH (t)<-[:AT_TURN]-(s:State) WHERE s.kind IN ['error', 'exit_code']
         RETURN {kind: s.kind, subject: s.subject, value: s.value} AS r ORDER BY r.kind, r.value
       } AS results,
       COLLECT {
         MATCH (t)<-[:AT_TURN]-(:State)-[:HAS_SIGNATURE]->(g:Signature)
         RETURN DISTINCT {uid: g.uid, text: g.text} AS g
       } AS signatures
ORDER BY trajectory, turn
"""

# Episodes of the sessions' failures that got past them, with the steps that helped.
PROJECT_RESOLUTIONS = """
UNWIND $tuids AS tuid
MATCH (r:Resolution {trajectory_uid: tuid, outcome: 'resolved'})
RETURN r.trajectory_id AS trajectory, r.signature_uid AS signature_uid,
       r.resolved_turn AS resolved_turn, r.command AS command,
       COLLECT {
         MATCH (r)-[s:STEP]->(t:Turn) WHERE s.helped
         RETURN {turn: t.idx, action: left(t.action, $action_chars)} AS step ORDER BY step.turn
       } AS helped
ORDER BY trajectory, resolved_turn
"""

# Edits whose later results were failures: (edit) -CAUSES-> (failure state of a later turn
# that ran something: an edit tool's own refusal, "No changes to make", is not what the
# earlier edit broke).
PROJECT_BROKEN_EDITS = """
UNWIND $tuids AS tuid
MATCH (e:State {trajectory_uid: tuid, kind: 'file_changed'})-[:CAUSES]->(f:State)
      -[:AT_TURN]->(ft:Turn)
WHERE f.turn > e.turn AND NONE(w IN $edit_words WHERE ft.action STARTS WITH w)
  AND ((f.kind = 'exit_code' AND f.value <> '0') OR EXISTS { (f)-[:HAS_SIGNATURE]->() })
RETURN e.subject AS path, e.trajectory_id AS trajectory, e.turn AS edited, f.turn AS broke,
       f.value AS error
ORDER BY trajectory, edited, broke
"""


def project_root(path: str | Path) -> str:
    """The git root of ``path`` when it is inside a work tree here, else the path itself
    (absolute, no trailing slash). Nothing is run: the folders are walked up to a ``.git``."""
    p = Path(path).expanduser()
    p = p if p.is_absolute() else Path.cwd() / p
    start = Path(*p.parts)  # normalised, symlinks kept: logs record the path as typed
    for folder in (start, *start.parents):
        try:
            if (folder / ".git").exists():
                return str(folder)
        except OSError:
            break
    return str(start)


def inside(cwd: str, root: str) -> bool:
    cwd, root = cwd.rstrip("/") or "/", root.rstrip("/") or "/"
    return cwd == root or cwd.startswith(root + "/") or root == "/"


@dataclass(frozen=True)
class Cite:
    session: str
    turn: int

    def __str__(self) -> str:
        return f"{short(self.session)} turn {self.turn}"


@dataclass
class MemoryItem:
    """One thing an earlier session learned, with what matches it later (``key``)."""

    kind: Kind
    key: str  # the signature uid, the canonical command, or the path
    text: str
    cites: list[Cite]
    sessions: int
    failures: int
    words: frozenset[str] = frozenset()  # what a prompt must mention for it to be relevant


@dataclass
class ProjectBrief:
    project: str
    sessions: list[str]
    items: list[MemoryItem]
    text: str  # "" means silence
    tokens: int
    budget: int
    omitted: int = 0
    considered: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for item in out["items"]:
            item["words"] = sorted(item["words"])
            item["cites"] = [{"session": c["session"], "turn": c["turn"]} for c in item["cites"]]
        return out


def short(session: str) -> str:
    return session[:8] if len(session) > 12 else session


# -- reading -----------------------------------------------------------------------------------


@dataclass
class SessionTurns:
    """One session's turns as the memory rules read them."""

    session: str
    turns: list[TurnRecord]
    signatures: dict[int, list[tuple[str, str]]]  # turn -> [(uid, text)]

    def failed(self, turn: TurnRecord) -> bool:
        return turn.failed or (bool(self.signatures.get(turn.turn)) and not turn.viewer)


@dataclass
class ProjectFacts:
    sessions: list[SessionTurns]
    resolutions: list[dict[str, Any]]
    broken_edits: list[dict[str, Any]]


class Reader:
    def __init__(self, session: neo4j.Session, tenant: str, timeout_s: float) -> None:
        self._session = session
        self.tenant = tenant
        self._timeout_s = timeout_s

    def read(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        params = {"tenant": self.tenant, **params}
        return run_read(
            self._session,
            statement,
            params,
            timeout_s=self._timeout_s,
            doing="project memory query",
        )

    def sessions(self, root: str, exclude: Iterable[str]) -> list[tuple[str, str]]:
        """(id, uid) of the project's sessions, ``exclude`` left out."""
        needle = '"cwd": ' + json.dumps(root.rstrip("/") or "/", ensure_ascii=False)[:-1]
        skip = set(exclude)
        out: list[tuple[str, str]] = []
        for r in self.read(PROJECT_TRAJECTORIES, needle=needle):
            try:
                cwd = json.loads(r["metadata"] or "{}").get("cwd")
            except ValueError:
                continue
            if isinstance(cwd, str) and inside(cwd, root) and r["id"] not in skip:
                out.append((r["id"], r["uid"]))
        return out[:MAX_SESSIONS]

    def facts(self, tuids: list[str]) -> ProjectFacts:
        by_session: dict[str, SessionTurns] = {}
        turns = self.read(PROJECT_TURNS, tuids=tuids, action_chars=ACTION_CHARS, tail_chars=TAIL)
        for r in turns:
            st = by_session.setdefault(r["trajectory"], SessionTurns(r["trajectory"], [], {}))
            results = [
                Result(x["kind"], x["subject"] or "", "", x["value"] or "") for x in r["results"]
            ]
            st.turns.append(TurnRecord(r["turn"], r["action"] or "", results, r["tail"] or ""))
            if r["signatures"]:
                st.signatures[r["turn"]] = [(g["uid"], g["text"]) for g in r["signatures"]]
        return ProjectFacts(
            sessions=list(by_session.values()),
            resolutions=self.read(PROJECT_RESOLUTIONS, tuids=tuids, action_chars=ACTION_CHARS),
            broken_edits=self.read(
                PROJECT_BROKEN_EDITS, tuids=tuids, edit_words=list(shell.EDIT_CALL_PREFIXES)
            ),
        )


# -- the items ---------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z_][\w.-]{2,}")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "not",
        "with",
        "from",
        "this",
        "that",
        "error",
        "errors",
        "failed",
        "file",
        "line",
        "lines",
        "exit",
        "code",
        "command",
        "run",
        "python",
        "bash",
        "uv",
        "npm",
        "test",
        "tests",
    ]
)


def words_of(*texts: str) -> frozenset[str]:
    out: set[str] = set()
    for text in texts:
        for w in _WORD.findall(text):
            w = w.lower().strip(".-")
            for part in {w, w.rsplit("/", 1)[-1], w.rsplit(".", 1)[0]}:
                if len(part) >= 3 and part not in _STOP:
                    out.add(part)
    return frozenset(out)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _cites(cites: Sequence[Cite], limit: int = 3) -> str:
    shown = ", ".join(str(c) for c in cites[:limit])
    return shown + (f", +{len(cites) - limit} more" if len(cites) > limit else "")


def recurring_failures(facts: ProjectFacts, min_failures: int = 2) -> list[MemoryItem]:
    seen: dict[str, dict[str, Any]] = {}
    for st in facts.sessions:
        for turn in st.turns:
            if not st.failed(turn):
                continue
            for uid, text in st.signatures.get(turn.turn, []):
                entry = seen.setdefault(
                    uid, {"text": text, "cites": [], "error": "", "cmds": set()}
                )
                entry["cites"].append(Cite(st.session, turn.turn))
                entry["cmds"].add(first_line(turn.action, COMMAND_CHARS))
                entry["error"] = entry["error"] or turn.failure_text(ERROR_CHARS)
    fixes: dict[str, tuple[Cite, str]] = {}
    for r in facts.resolutions:
        if r["signature_uid"] in fixes or r["signature_uid"] not in seen:
            continue
        steps = [s for s in r["helped"] if not is_read_only(s["action"] or "")]
        if steps:
            step = steps[-1]
            fixes[r["signature_uid"]] = (
                Cite(r["trajectory"], step["turn"]),
                first_line(step["action"] or "", COMMAND_CHARS),
            )
        elif r["resolved_turn"] is not None:
            fixes[r["signature_uid"]] = (
                Cite(r["trajectory"], r["resolved_turn"]),
                "re-running " + first_line(r["command"] or "", COMMAND_CHARS),
            )
    items: list[MemoryItem] = []
    for uid, e in seen.items():
        cites: list[Cite] = e["cites"]
        if len(cites) < min_failures:
            continue
        sessions = len({c.session for c in cites})
        where = f"{len(cites)} times in {sessions} session{'s' if sessions > 1 else ''}"
        text = f"Failed {where} ({_cites(cites)}): {_cut(e['error'], ERROR_CHARS)}."
        fix = fixes.get(uid)
        text += f" Got past it at {fix[0]}: `{fix[1]}`." if fix else " Nothing got past it."
        items.append(
            MemoryItem(
                "recurring_failure",
                uid,
                text,
                cites,
                sessions,
                len(cites),
                words_of(e["text"], *e["cmds"]),
            )
        )
    return items


def never_worked(facts: ProjectFacts) -> list[MemoryItem]:
    runs: dict[str, dict[str, Any]] = {}
    for st in facts.sessions:
        for turn in st.turns:
            canon = turn.canon
            if canon.kind != "shell" or turn.viewer:
                continue
            entry = runs.setdefault(
                canon.text, {"ok": 0, "cites": [], "error": "", "line": first_line(turn.action)}
            )
            if st.failed(turn):
                entry["cites"].append(Cite(st.session, turn.turn))
                entry["error"] = entry["error"] or turn.failure_text(ERROR_CHARS)
            else:
                entry["ok"] += 1
    items: list[MemoryItem] = []
    for key, e in runs.items():
        cites: list[Cite] = e["cites"]
        if e["ok"] or not cites:
            continue
        sessions = len({c.session for c in cites})
        line = _cut(e["line"], COMMAND_CHARS)
        n = len(cites)
        text = (
            f"`{line}` never worked here: failed {n} time{'s' if n > 1 else ''} "
            f"({_cites(cites)}): {_cut(e['error'], ERROR_CHARS)}."
        )
        items.append(MemoryItem("never_worked", key, text, cites, sessions, n, words_of(line)))
    return items


def risky_files(facts: ProjectFacts) -> list[MemoryItem]:
    by_path: dict[str, dict[str, Any]] = {}
    for r in facts.broken_edits:
        entry = by_path.setdefault(r["path"], {"cites": [], "error": r["error"] or ""})
        cite = Cite(r["trajectory"], r["edited"])
        if cite not in entry["cites"]:
            entry["cites"].append(cite)
    items: list[MemoryItem] = []
    for path, e in by_path.items():
        cites: list[Cite] = e["cites"]
        sessions = len({c.session for c in cites})
        text = (
            f"Edits to `{_cut(path, COMMAND_CHARS)}` broke things before ({_cites(cites)}): "
            f"{_cut(e['error'], ERROR_CHARS)}."
        )
        items.append(
            MemoryItem("risky_file", path, text, cites, sessions, len(cites), words_of(path))
        )
    return items


def ranked(items: list[MemoryItem]) -> list[MemoryItem]:
    return sorted(items, key=lambda i: (-i.sessions, -i.failures, i.text))


def relevant(items: list[MemoryItem], prompt: str) -> list[MemoryItem]:
    said = words_of(prompt)
    return [i for i in items if i.words & said]


def render(
    root: str, sessions: int, items: list[MemoryItem], budget: int
) -> tuple[str, list[MemoryItem]]:
    """The text within ``budget`` tokens, items taken round-robin by kind; "" when none fits."""
    queues = {k: ranked([i for i in items if i.kind == k]) for k in KINDS}
    plural = "s" if sessions != 1 else ""
    head = (
        f"{HEAD} ({root}; {sessions} earlier session{plural}; "
        "turns count each session's tool calls from 0):"
    )
    lines: list[str] = []
    taken: list[MemoryItem] = []
    while any(queues.values()):
        for kind in KINDS:
            if not queues[kind]:
                continue
            item = queues[kind].pop(0)
            trial = "\n".join([head, *lines, f"- {item.text}"])
            if count_tokens(trial) <= budget:
                lines.append(f"- {item.text}")
                taken.append(item)
    if not taken:
        return "", []
    return "\n".join([head, *lines]), taken


def project_brief(
    driver: neo4j.Driver,
    *,
    database: str,
    tenant: str,
    project: str,
    budget: int = DEFAULT_BUDGET,
    exclude: Iterable[str] = (),
    prompt: str | None = None,
    resolve_root: bool = True,
    min_failures: int = 2,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> ProjectBrief:
    """What the project's other sessions learned, within ``budget`` tokens ("" = silence)."""
    check_budget(budget, MIN_BUDGET, MAX_BUDGET)
    root = project_root(project) if resolve_root else project.rstrip("/") or "/"
    with (
        graph_errors("project memory query"),
        driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session,
    ):
        reader = Reader(session, tenant, timeout_s)
        found = reader.sessions(root, exclude)
        facts = reader.facts([uid for _, uid in found]) if found else ProjectFacts([], [], [])
    items = recurring_failures(facts, min_failures) + never_worked(facts) + risky_files(facts)
    considered: dict[str, int] = {k: sum(1 for i in items if i.kind == k) for k in KINDS}
    if prompt is not None:
        items = relevant(items, prompt)
    text, taken = render(root, len(found), items, budget)
    return ProjectBrief(
        project=root,
        sessions=[sid for sid, _ in found],
        items=taken,
        text=text,
        tokens=count_tokens(text) if text else 0,
        budget=budget,
        omitted=len(items) - len(taken),
        considered=considered,
    )
