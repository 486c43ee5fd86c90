"""One trajectory's memory as of a turn: what the brief and the reminder rules read.

``Memory`` holds a READ session and fetches each part on first use (queries/memory/cypher.py, the
``MEMORY_*`` statements). ``before_turn`` = t means the graph as it was built from turns
0 … t-1: later turns, their states and every edge that reaches them are invisible.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import neo4j

from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.extractors.actions import COMMAND_FAILURE, Canon, canonical, is_read_only
from trajgraph.graph import node_ids
from trajgraph.graph.connection import graph_errors, run_read
from trajgraph.queries.lessons import cypher as lessons_cypher
from trajgraph.queries.memory import cypher
from trajgraph.schemas.trajectory import max_turn_idx

_MESSAGE = re.compile(r"\w(?:Error|Exception)\b:\s*\S")
_CLASS = re.compile(r"\w(?:Error|Exception)\b")
_PREFIXED = re.compile(r"^(?:error|fatal|ERROR|FATAL|Error)\b\S*:\s*\S")
# Lines that only report the exit code or wrap the output.
_NOTE = re.compile(
    r"^(?:\[?The command .*exit code|exit code:? ?-?\d+|</?(?:returncode|output)>|"
    r"<returncode>.*</returncode>)",
    re.IGNORECASE,
)
EVERYTHING = 1 << 62  # $before when no turn is given
MAX_TURN = max_turn_idx() + 1  # before_turn: the turn after the last one the contract allows
QUERY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Result:
    kind: str
    subject: str
    attribute: str
    value: str


@dataclass
class TurnRecord:
    """One earlier turn: its action and the result states its observation showed."""

    turn: int
    action: str
    results: list[Result] = field(default_factory=list)
    tail: str = ""  # the end of the observation, verbatim

    @cached_property
    def canon(self) -> Canon:
        return canonical(self.action)

    @cached_property
    def read_only(self) -> bool:
        """Changes nothing a re-run depends on (reads, listings, test runs, checksums)."""
        return is_read_only(self.action)

    @cached_property
    def viewer(self) -> bool:
        """Only shows content (cat, grep, ls ...): errors in its output are that content."""
        return is_read_only(self.action, checks=False)

    @property
    def errors(self) -> list[str]:
        return [r.value for r in self.results if r.kind == "error"]

    @property
    def exit_codes(self) -> list[str]:
        return [r.value.strip() for r in self.results if r.kind == "exit_code"]

    @property
    def failed(self) -> bool:
        """The observation was an error: a non-zero exit code, or error lines and no exit code
        0 (a script that prints "Caught expected ValueError" and exits 0 did not fail). A
        read-only command (cat, grep, ...) fails only when it could not run: the errors it
        shows otherwise are the content it was asked to show."""
        codes = self.exit_codes
        if any(c != "0" for c in codes):
            return True
        if "0" in codes or not self.errors:
            return False
        if self.viewer:
            return any(COMMAND_FAILURE.search(e) for e in self.errors)
        return True

    def failure_text(self, limit: int = 240) -> str:
        """The error as logged (verbatim lines, joined), and the exit code when not 0."""
        errors = list(dict.fromkeys(e for e in self.errors if e.strip()))
        # An exception with its message says most, then an ``error: …`` line; two at most.
        errors.sort(key=_error_rank)
        text = " / ".join(errors[:2])
        if not text:  # no error line was extracted: the observation's last line says it
            text = self.last_line()
        codes = [c for c in self.exit_codes if c != "0"]
        if codes:
            text = (text + " " if text else "") + f"(exit code {codes[0]})"
        return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

    def last_line(self) -> str:
        """The observation's last line that is not an exit-code note or a wrapper tag."""
        for line in reversed(
            self.tail.splitlines()[1:] if len(self.tail) >= 400 else self.tail.splitlines()
        ):
            line = line.strip()
            if line and not _NOTE.search(line):
                return line
        return ""


def _error_rank(line: str) -> int:
    if _MESSAGE.search(line):
        return 0
    return 1 if _CLASS.search(line) or _PREFIXED.match(line) else 2


def is_exit_note(line: str) -> bool:
    """A line that only reports an exit code or wraps output (``exit code: 0``)."""
    return bool(_NOTE.search(line.strip()))


@dataclass(frozen=True)
class CurrentState:
    subject: str
    attribute: str
    kind: str
    value: str
    turn: int
    earlier: tuple[tuple[str, int], ...]  # (value, turn), newest first

    @property
    def previous(self) -> tuple[str, int] | None:
        """The latest earlier value that differs from the current one."""
        return next(((v, t) for v, t in self.earlier if v != self.value), None)


def check_before(before_turn: int | None) -> int:
    if before_turn is None:
        return EVERYTHING
    if not 0 <= before_turn <= MAX_TURN:
        raise ConfigError(f"before_turn must be between 0 and {MAX_TURN}, got {before_turn}")
    return before_turn


class Memory:
    """Reads of one trajectory as of ``before_turn`` (None: all of it), in one session."""

    def __init__(
        self,
        session: neo4j.Session,
        *,
        tenant: str,
        trajectory: str,
        before_turn: int | None = None,
        timeout_s: float = QUERY_TIMEOUT_S,
    ) -> None:
        self._session = session
        self.tenant = tenant
        self.trajectory = trajectory
        self.before_turn = before_turn
        self.before = check_before(before_turn)
        self.tuid = node_ids.trajectory_uid(tenant, trajectory)
        self._timeout_s = timeout_s
        rows = self.read(cypher.MEMORY_TRAJECTORY)
        if not rows:
            raise NotFoundError("trajectory", trajectory, tenant=tenant)
        self.task: str = rows[0]["task"] or ""
        self.turn_count: int = rows[0]["turns"]
        self.last_turn: int | None = rows[0]["last"][0] if rows[0]["last"] else None

    def read(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        params = {"tuid": self.tuid, "before": self.before, **params}
        return run_read(
            self._session, statement, params, timeout_s=self._timeout_s, doing="memory query"
        )

    @cached_property
    def turns(self) -> list[TurnRecord]:
        return [
            TurnRecord(r["turn"], r["action"] or "", [Result(**x) for x in r["results"]], r["tail"])
            for r in self.read(cypher.MEMORY_TURNS)
        ]

    @cached_property
    def current_states(self) -> list[CurrentState]:
        return [
            CurrentState(
                r["subject"],
                r["attribute"],
                r["kind"],
                r["value"],
                r["turn"],
                tuple((e["value"], e["turn"]) for e in r["earlier"]),
            )
            for r in self.read(cypher.MEMORY_CURRENT_STATES)
        ]

    def failure_causes(self, turns: list[int]) -> dict[int, list[dict[str, Any]]]:
        if not turns:
            return {}
        return {
            r["turn"]: r["causes"] for r in self.read(cypher.MEMORY_FAILURE_CAUSES, turns=turns)
        }

    def identifiers(
        self, kinds: tuple[str, ...], *, limit: int = 12, min_turns: int = 2
    ) -> list[dict[str, Any]]:
        return self.read(
            cypher.MEMORY_IDENTIFIERS, kinds=list(kinds), limit=limit, min_turns=min_turns
        )

    def value_history(self, keys: list[str]) -> list[dict[str, Any]]:
        """States of the given keys (``subject`` the key, or ``attribute`` the key of a
        settings file ``subject``), oldest first per (subject, attribute)."""
        if not keys:
            return []
        return self.read(cypher.MEMORY_VALUE_HISTORY, keys=sorted(set(keys)))

    @cached_property
    def fixes(self) -> list[dict[str, Any]]:
        return self.read(cypher.MEMORY_FIXES)

    # -- other runs of the same failures (queries/lessons/hints.py) ---------------------------

    def signatures_at(self, turns: list[int]) -> list[dict[str, Any]]:
        """The failure signatures the given turns show: turn, uid, text, error."""
        if not turns:
            return []
        return self.read(lessons_cypher.LESSONS_TURNS_SIGNATURES, turns=sorted(set(turns)))

    @cached_property
    def open_episodes(self) -> list[dict[str, Any]]:
        """This trajectory's failures no re-run got past before ``before_turn``."""
        return self.read(lessons_cypher.LESSONS_OPEN_EPISODES)

    def other_runs(self, signature_uids: list[str], action_chars: int) -> list[dict[str, Any]]:
        """Other trajectories' episodes of the given signatures, with their steps."""
        if not signature_uids:
            return []
        return self.read(
            lessons_cypher.LESSONS_RESOLUTIONS,
            tenant=self.tenant,
            uids=sorted(set(signature_uids)),
            exclude=self.trajectory,
            action_chars=action_chars,
        )


@contextmanager
def open_memory(
    driver: neo4j.Driver,
    *,
    database: str,
    tenant: str,
    trajectory: str,
    before_turn: int | None = None,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> Iterator[Memory]:
    with (
        graph_errors("memory query"),
        driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session,
    ):
        yield Memory(
            session,
            tenant=tenant,
            trajectory=trajectory,
            before_turn=before_turn,
            timeout_s=timeout_s,
        )
