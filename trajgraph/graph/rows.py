"""Turn one normalized trajectory plus its merged extraction into parameter rows for the writer.

This is where extraction references (``turn:N``, ``state:KEY``, ``object:NAME``) become
deterministic uids; rows whose endpoints do not resolve are dropped and counted.
"""

from __future__ import annotations

import hashlib
import json
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

# Order matters: nodes before the edges that MATCH them; the completion mark goes last.
ROW_KINDS: tuple[str, ...] = (
    "trajectories",
    "turns",
    "next",
    "states",
    "objects",
    "causes_turn_state",
    "causes_state_turn",
    "causes_state_state",
    "causes_turn_turn",
    "associated_state_object",
    "associated_state_state",
    "associated_object_object",
    "supersedes",
    "signatures",
    "resolutions",
    "resolution_steps",
    "complete",
)


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
    tenant: str = traj.get("tenant") or "default"
    tid: str = traj["id"]
    tuid = node_ids.trajectory_uid(tenant, tid)
    out = GraphRows(trajectory_uid=tuid, content_hash=content_hash)
    r = out.rows
    base = {"tenant": tenant, "trajectory_uid": tuid, "trajectory_id": tid}

    turns = traj["turns"]
    r["trajectories"].append(
        {
            "uid": tuid,
            "props": {
                "id": tid,
                "tenant": tenant,
                "source": traj["source"],
                "task": traj.get("task", ""),
                "format": traj["format"],
                "outcome": traj.get("outcome"),
                "metadata": json.dumps(
                    traj.get("metadata") or {}, sort_keys=True, ensure_ascii=False
                ),
                "turn_count": len(turns),
                "extractor": extractor,
            },
        }
    )

    turn_uids: dict[int, str] = {}
    for turn in turns:
        idx = int(turn["idx"])
        tu = node_ids.turn_uid(tenant, tid, idx)
        turn_uids[idx] = tu
        r["turns"].append(
            {
                "uid": tu,
                "trajectory_uid": tuid,
                "props": {
                    **base,
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
    order = sorted(turn_uids)
    for a, b in pairwise(order):
        r["next"].append({"src": turn_uids[a], "dst": turn_uids[b]})

    refs: dict[str, tuple[str, str]] = {f"turn:{i}": ("turn", u) for i, u in turn_uids.items()}
    written_states: dict[str, StateItem] = {}

    for s in extraction.states:
        if s.turn not in turn_uids:
            out.dropped += 1
            continue
        subject = s.subject[:MAX_INDEXED_CHARS]
        su = node_ids.state_uid(tenant, tid, s.turn, subject, s.attribute, s.value)
        if f"state:{s.key}" in refs:
            out.dropped += 1
            continue
        refs[f"state:{s.key}"] = ("state", su)
        written_states.setdefault(su, s)
        r["states"].append(
            {
                "uid": su,
                "turn_uid": turn_uids[s.turn],
                "props": {
                    **base,
                    "turn": s.turn,
                    "subject": subject,
                    "attribute": s.attribute[:MAX_INDEXED_CHARS],
                    "value": s.value,
                    "kind": s.kind,
                    "text": s.text,
                    "extractor": s.extractor or extractor,
                },
            }
        )
    _dedupe(r["states"])

    for o in extraction.objects:
        if not o.name or len(o.name) > MAX_INDEXED_CHARS:
            out.dropped += 1
            continue
        ou = node_ids.object_uid(tenant, tid, o.name)
        refs[f"object:{o.name}"] = ("object", ou)
        seen_turns = sorted({t for t in o.turns if t in turn_uids})
        r["objects"].append(
            {
                "uid": ou,
                "identifier_uid": node_ids.identifier_uid(tenant, o.name),
                "turn_uids": [turn_uids[t] for t in seen_turns],
                "props": {
                    **base,
                    "name": o.name,
                    "kind": o.kind,
                    "turns": seen_turns,
                    "first_turn": seen_turns[0] if seen_turns else None,
                },
            }
        )
    _dedupe(r["objects"])

    for c in extraction.causes:
        src, dst = refs.get(c.src), refs.get(c.dst)
        if src is None or dst is None or src[1] == dst[1]:
            out.dropped += 1
            continue
        kind = f"causes_{src[0]}_{dst[0]}"
        if kind not in r:
            out.dropped += 1
            continue
        r[kind].append(
            {
                "src": src[1],
                "dst": dst[1],
                "turns": sorted(set(c.turns)),
                "reason": c.reason,
                "extractor": extractor,
            }
        )

    for assoc in extraction.associations:
        ea, eb = refs.get(assoc.a), refs.get(assoc.b)
        if ea is None or eb is None or ea[1] == eb[1] or "turn" in (ea[0], eb[0]):
            out.dropped += 1
            continue
        # ASSOCIATED is undirected: store it once, state before object, else lower uid first.
        if (ea[0] == "object" and eb[0] == "state") or (ea[0] == eb[0] and ea[1] > eb[1]):
            ea, eb = eb, ea
        r[f"associated_{ea[0]}_{eb[0]}"].append(
            {"src": ea[1], "dst": eb[1], "turns": sorted(set(assoc.turns))}
        )

    for sup in extraction.supersedes:
        newer, older = refs.get(sup.newer), refs.get(sup.older)
        if newer is None or older is None or newer[0] != "state" or older[0] != "state":
            out.dropped += 1
            continue
        r["supersedes"].append({"src": newer[1], "dst": older[1], "turns": sorted(set(sup.turns))})

    for kind in ROW_KINDS:
        if kind.startswith(("causes_", "associated_", "supersedes")):
            _dedupe_edges(r[kind])
    r["signatures"], r["resolutions"], r["resolution_steps"] = lesson_rows(
        tenant=tenant,
        trajectory_id=tid,
        turns=turns,
        states=[(st, uid) for uid, st in written_states.items()],
        turn_uids=turn_uids,
        base=base,
    )
    r["complete"].append({"uid": tuid, "content_hash": content_hash})
    return out


def _dedupe(rows: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    keep = []
    for row in rows:
        if row["uid"] not in seen:
            seen.add(row["uid"])
            keep.append(row)
    rows[:] = keep


def _dedupe_edges(rows: list[dict[str, Any]]) -> None:
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["src"], row["dst"])
        if key in merged:
            merged[key]["turns"] = sorted(set(merged[key]["turns"]) | set(row["turns"]))
        else:
            merged[key] = row
    rows[:] = list(merged.values())
