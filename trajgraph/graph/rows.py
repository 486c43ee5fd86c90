"""Turn one normalized trajectory plus its merged extraction into parameter rows for the writer.

This is where extraction references (``turn:N``, ``state:KEY``, ``object:NAME``) become
deterministic uids; rows whose endpoints do not resolve are dropped and counted. One small
builder per node or edge kind (``BUILDERS``, in write order) makes that kind's rows; each
kind's Cypher statement is graph/cypher.py's (graph/writer.py ``STATEMENTS``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from trajgraph.graph import node_ids
from trajgraph.graph.lesson_rows import LESSONS_VERSION, lesson_rows
from trajgraph.schemas.extraction import StateItem, TrajectoryExtraction

# What a trajectory's subgraph holds for a given extraction: the nodes, properties and edges
# build_rows and the writer make of it. Bump it when they change: it is part of the content
# hash, so a re-ingest of unchanged input (`--rescan` with a manifest) then rewrites the
# trajectories an older version wrote instead of skipping them as unchanged.
GRAPH_MODEL = 1

# Neo4j range-index keys are limited to about 8 KB; identifiers beyond this are not identifiers.
MAX_INDEXED_CHARS = 1024


@dataclass
class GraphRows:
    trajectory_uid: str
    content_hash: str
    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {k: [] for k in ROW_KINDS}
    )
    dropped: int = 0
    # Windows extracted by a stand-in because a server could not answer: the rows are
    # written, and a manifest run reads the file again next time (trajgraph/jobs/manifest.py).
    retry_windows: int = 0
    # The streamed trajectory's version these rows were built from (0 in batch runs); the
    # stream writes a trajectory's newest version only (pipelines/stream_transforms.py).
    version: int = 0
    # Set by the embedding step when it passed the rows on without vectors because the graph
    # held this very version: should another job replace that version before these rows are
    # written, the writer stores them under a hash no run produces, so the next run embeds.
    embedding_skipped: bool = False

    def count(self) -> int:
        return sum(len(v) for k, v in self.rows.items() if k != "complete")


def content_hash(traj: dict[str, Any], extraction: TrajectoryExtraction, *, extractor: str) -> str:
    """Hash of everything a trajectory's subgraph is built from: the input, the extractor,
    what it extracted and the graph model (GRAPH_MODEL). Hashing the extraction (not only
    its settings) matters for the LLM: a window the heuristic stood in for last time may
    have LLM findings now."""
    h = hashlib.blake2b(digest_size=16)
    payload = {k: v for k, v in traj.items() if k != "source"}
    h.update(json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str).encode())
    h.update(f"\x1f{extractor}\x1f".encode())
    # Signatures and resolutions are derived here, not by the extractor, and so is the rest
    # of the subgraph: a new version of their rules must rewrite the trajectory too.
    h.update(f"{LESSONS_VERSION}\x1fgraph-model/{GRAPH_MODEL}\x1f".encode())
    h.update(extraction.model_dump_json().encode())
    return h.hexdigest()


def build_rows(
    traj: dict[str, Any],
    extraction: TrajectoryExtraction,
    *,
    extractor: str,
    content_hash: str,
) -> GraphRows:
    b = Build.start(traj, extraction, extractor=extractor, content_hash=content_hash)
    for builder in BUILDERS:
        builder.build(b)
    return b.out


@dataclass
class Build:
    """One trajectory's rows while they are built: what the builders share (its identity,
    the uids of the turns, the references resolved so far)."""

    traj: dict[str, Any]
    extraction: TrajectoryExtraction
    extractor: str
    tenant: str
    tid: str
    out: GraphRows
    base: dict[str, str]  # the properties every node of the trajectory carries
    turn_uids: dict[int, str] = field(default_factory=dict)
    # extraction reference (turn:N, state:KEY, object:NAME) -> (node kind, uid)
    refs: dict[str, tuple[str, str]] = field(default_factory=dict)
    written_states: dict[str, StateItem] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        traj: dict[str, Any],
        extraction: TrajectoryExtraction,
        *,
        extractor: str,
        content_hash: str,
    ) -> Build:
        tenant: str = traj.get("tenant") or "default"
        tid: str = traj["id"]
        tuid = node_ids.trajectory_uid(tenant, tid)
        return cls(
            traj=traj,
            extraction=extraction,
            extractor=extractor,
            tenant=tenant,
            tid=tid,
            out=GraphRows(trajectory_uid=tuid, content_hash=content_hash),
            base={"tenant": tenant, "trajectory_uid": tuid, "trajectory_id": tid},
        )

    @property
    def rows(self) -> dict[str, list[dict[str, Any]]]:
        return self.out.rows

    def drop(self) -> None:
        self.out.dropped += 1


@dataclass(frozen=True)
class Builder:
    """Makes the rows of ``kinds`` (row kinds, in write order) for one trajectory."""

    kinds: tuple[str, ...]
    build: Callable[[Build], None]


# -- nodes -------------------------------------------------------------------------------------


def _trajectory(b: Build) -> None:
    traj = b.traj
    b.rows["trajectories"].append(
        {
            "uid": b.out.trajectory_uid,
            "props": {
                "id": b.tid,
                "tenant": b.tenant,
                "source": traj["source"],
                "task": traj.get("task", ""),
                "format": traj["format"],
                "outcome": traj.get("outcome"),
                "metadata": json.dumps(
                    traj.get("metadata") or {}, sort_keys=True, ensure_ascii=False
                ),
                "turn_count": len(traj["turns"]),
                "extractor": b.extractor,
            },
        }
    )


def _turns(b: Build) -> None:
    for turn in b.traj["turns"]:
        idx = int(turn["idx"])
        tu = node_ids.turn_uid(b.tenant, b.tid, idx)
        b.turn_uids[idx] = tu
        b.rows["turns"].append(
            {
                "uid": tu,
                "trajectory_uid": b.out.trajectory_uid,
                "props": {
                    **b.base,
                    "idx": idx,
                    "action": turn["action"],
                    "observation": turn["observation"],
                    "thought": turn.get("thought"),
                    "reward": turn.get("reward"),
                    "timestamp": turn.get("timestamp"),
                    "actor": turn.get("actor"),
                },
            }
        )
    b.refs.update({f"turn:{i}": ("turn", u) for i, u in b.turn_uids.items()})


def _next(b: Build) -> None:
    order = sorted(b.turn_uids)
    for x, y in pairwise(order):
        b.rows["next"].append({"src": b.turn_uids[x], "dst": b.turn_uids[y]})


def _states(b: Build) -> None:
    for s in b.extraction.states:
        if s.turn not in b.turn_uids:
            b.drop()
            continue
        subject = s.subject[:MAX_INDEXED_CHARS]
        su = node_ids.state_uid(b.tenant, b.tid, s.turn, subject, s.attribute, s.value)
        if f"state:{s.key}" in b.refs:
            b.drop()
            continue
        b.refs[f"state:{s.key}"] = ("state", su)
        b.written_states.setdefault(su, s)
        b.rows["states"].append(
            {
                "uid": su,
                "turn_uid": b.turn_uids[s.turn],
                "props": {
                    **b.base,
                    "turn": s.turn,
                    "subject": subject,
                    "attribute": s.attribute[:MAX_INDEXED_CHARS],
                    "value": s.value,
                    "kind": s.kind,
                    "text": s.text,
                    "extractor": s.extractor or b.extractor,
                },
            }
        )
    _dedupe(b.rows["states"])


def _objects(b: Build) -> None:
    for o in b.extraction.objects:
        if not o.name or len(o.name) > MAX_INDEXED_CHARS:
            b.drop()
            continue
        ou = node_ids.object_uid(b.tenant, b.tid, o.name)
        b.refs[f"object:{o.name}"] = ("object", ou)
        seen_turns = sorted({t for t in o.turns if t in b.turn_uids})
        b.rows["objects"].append(
            {
                "uid": ou,
                "identifier_uid": node_ids.identifier_uid(b.tenant, o.name),
                "turn_uids": [b.turn_uids[t] for t in seen_turns],
                "props": {
                    **b.base,
                    "name": o.name,
                    "kind": o.kind,
                    "turns": seen_turns,
                    "first_turn": seen_turns[0] if seen_turns else None,
                },
            }
        )
    _dedupe(b.rows["objects"])


# -- edges between them (graph/cypher.py MERGE_EDGES) ------------------------------------------

_CAUSES = ("causes_turn_state", "causes_state_turn", "causes_state_state", "causes_turn_turn")
_ASSOCIATED = ("associated_state_object", "associated_state_state", "associated_object_object")


def _causes(b: Build) -> None:
    for c in b.extraction.causes:
        src, dst = b.refs.get(c.src), b.refs.get(c.dst)
        if src is None or dst is None or src[1] == dst[1]:
            b.drop()
            continue
        kind = f"causes_{src[0]}_{dst[0]}"
        if kind not in _CAUSES:
            b.drop()
            continue
        b.rows[kind].append(
            {
                "src": src[1],
                "dst": dst[1],
                "turns": sorted(set(c.turns)),
                "reason": c.reason,
                "extractor": b.extractor,
            }
        )
    _dedupe_edges(b, _CAUSES)


def _associated(b: Build) -> None:
    for assoc in b.extraction.associations:
        ea, eb = b.refs.get(assoc.a), b.refs.get(assoc.b)
        if ea is None or eb is None or ea[1] == eb[1] or "turn" in (ea[0], eb[0]):
            b.drop()
            continue
        # ASSOCIATED is undirected: store it once, state before object, else lower uid first.
        if (ea[0] == "object" and eb[0] == "state") or (ea[0] == eb[0] and ea[1] > eb[1]):
            ea, eb = eb, ea
        b.rows[f"associated_{ea[0]}_{eb[0]}"].append(
            {"src": ea[1], "dst": eb[1], "turns": sorted(set(assoc.turns))}
        )
    _dedupe_edges(b, _ASSOCIATED)


def _supersedes(b: Build) -> None:
    for sup in b.extraction.supersedes:
        newer, older = b.refs.get(sup.newer), b.refs.get(sup.older)
        if newer is None or older is None or newer[0] != "state" or older[0] != "state":
            b.drop()
            continue
        b.rows["supersedes"].append(
            {"src": newer[1], "dst": older[1], "turns": sorted(set(sup.turns))}
        )
    _dedupe_edges(b, ("supersedes",))


# -- cross-run memory and the completion mark --------------------------------------------------


def _lessons(b: Build) -> None:
    b.rows["signatures"], b.rows["resolutions"], b.rows["resolution_steps"] = lesson_rows(
        tenant=b.tenant,
        trajectory_id=b.tid,
        turns=b.traj["turns"],
        states=[(st, uid) for uid, st in b.written_states.items()],
        turn_uids=b.turn_uids,
        base=b.base,
    )


def _complete(b: Build) -> None:
    b.rows["complete"].append({"uid": b.out.trajectory_uid, "content_hash": b.out.content_hash})


# Order matters: nodes before the edges that MATCH them; the completion mark goes last.
BUILDERS: tuple[Builder, ...] = (
    Builder(("trajectories",), _trajectory),
    Builder(("turns",), _turns),
    Builder(("next",), _next),
    Builder(("states",), _states),
    Builder(("objects",), _objects),
    Builder(_CAUSES, _causes),
    Builder(_ASSOCIATED, _associated),
    Builder(("supersedes",), _supersedes),
    Builder(("signatures", "resolutions", "resolution_steps"), _lessons),
    Builder(("complete",), _complete),
)
ROW_KINDS: tuple[str, ...] = tuple(kind for builder in BUILDERS for kind in builder.kinds)


def _dedupe(rows: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    keep = []
    for row in rows:
        if row["uid"] not in seen:
            seen.add(row["uid"])
            keep.append(row)
    rows[:] = keep


def _dedupe_edges(b: Build, kinds: tuple[str, ...]) -> None:
    """One edge per (src, dst) of each kind, with the turns of all its mentions."""
    for kind in kinds:
        b.rows[kind] = _merged_edges(b.rows[kind])


def _merged_edges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["src"], row["dst"])
        if key in merged:
            merged[key]["turns"] = sorted(set(merged[key]["turns"]) | set(row["turns"]))
        else:
            merged[key] = row
    return list(merged.values())
