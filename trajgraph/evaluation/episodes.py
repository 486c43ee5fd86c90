"""Episode files for ``trajgraph eval``: AMA-Bench files as they are, or canonical episodes.

Two shapes are read, as one JSON object, a JSON list or JSONL, from files or folders (every
``*.json`` / ``*.jsonl`` inside):

* AMA-Bench: ``{episode_id, task, domain, trajectory: [{turn_idx, action, observation}],
  qa_pairs: [{question, answer, type: A|B|C|D}]}``; "step N" in a question is ``turn_idx`` N;
* canonical: ``{id, task, turns: [{idx?, action, observation}], qa_pairs: [{question, answer,
  type, needles?}]}`` (the synthetic episodes).

AMA-Bench's question types are mapped to capability names: A recall, B causal inference,
C state updating, D state abstraction. Errors name the file and the record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trajgraph.core.errors import InputError

CAPABILITIES = {"A": "recall", "B": "causal", "C": "state_updating", "D": "state_abstraction"}
CAPABILITY_ORDER = ("recall", "causal", "state_updating", "state_abstraction")


def episode_files(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out += sorted(
                f for f in path.iterdir() if f.suffix in (".json", ".jsonl") and f.is_file()
            )
        else:
            out.append(path)
    return out


def load_episodes(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Episodes as ``{id, task, domain, turns: [{idx, action, observation}], qa_pairs}``."""
    out: list[dict[str, Any]] = []
    for path in episode_files(paths):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror}") from e
        try:
            stripped = text.lstrip()
            if stripped.startswith("["):
                records = list(enumerate(json.loads(text), 1))
            elif stripped.startswith("{") and path.suffix == ".json":
                records = [(1, json.loads(text))]
            else:
                records = [
                    (n, json.loads(line))
                    # JSON lines end at "\n" only: U+2028 and U+0085 may stand inside a record
                    for n, line in enumerate(text.split("\n"), 1)
                    if line.strip()
                ]
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON or JSONL: {e}") from e
        single = len(records) == 1
        for n, ep in records:
            out.append(_episode(ep, f"{path}: record {n}", path.stem, n, single))
    ids = [e["id"] for e in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"episode ids repeat across the files: {', '.join(dupes[:5])}")
    return out


def _episode(ep: Any, where: str, stem: str, n: int, single: bool) -> dict[str, Any]:
    if not isinstance(ep, dict):
        raise InputError(f"{where}: an episode is a JSON object")
    if isinstance(ep.get("trajectory"), list) and "turns" not in ep:
        turns = [_ama_step(s, i, where) for i, s in enumerate(ep["trajectory"])]
    elif isinstance(ep.get("turns"), list):
        turns = ep["turns"]
    else:
        raise InputError(f"{where}: an episode needs a list of turns (or an AMA 'trajectory')")
    qa = ep.get("qa_pairs")
    if not isinstance(qa, list) or not qa:
        raise InputError(f"{where}: no qa_pairs to score")
    for q in qa:
        if not isinstance(q, dict) or "question" not in q or "answer" not in q:
            raise InputError(f"{where}: every qa_pair needs question and answer")
        kind = str(q.get("type") or "other")
        q["type"] = CAPABILITIES.get(kind, kind)
    if ep.get("id"):
        ident = str(ep["id"])
    elif single:  # one episode per file (AMA-Bench): the file name says what it is
        ident = stem
    else:
        ident = f"{stem}-{ep.get('episode_id', n)}"
    for t_i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise InputError(f"{where}: turn {t_i} is not an object")
        t.setdefault("idx", t_i)
        t["action"] = _text(t.get("action"))
        t["observation"] = _text(t.get("observation"))
    return {
        **{k: v for k, v in ep.items() if k not in ("trajectory", "turns")},
        "id": ident,
        "task": _text(ep.get("task")),
        "domain": str(ep.get("domain") or "-"),
        "turns": turns,
        "qa_pairs": qa,
    }


def _ama_step(step: Any, i: int, where: str) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise InputError(f"{where}: trajectory step {i} is not an object")
    idx = step.get("turn_idx", i)
    if not isinstance(idx, int):
        raise InputError(f"{where}: trajectory step {i} has turn_idx {idx!r}, not an integer")
    return {"idx": idx, "action": step.get("action"), "observation": step.get("observation")}


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
