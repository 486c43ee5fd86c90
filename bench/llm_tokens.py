"""LLM token benchmark: prompt tokens sent ÷ tokens of the trajectories, on the real logs.

Runs the LLM extractor over every trajectory in ../shared/trajectories against the local
OpenAI-compatible test server (tests/fake_openai.py), which counts the prompt tokens of each
request it receives (messages plus the schema, tiktoken cl100k). The trajectory side is the
task plus every action and observation. Three configurations side by side, in one run:

* packed (the default: windows packed into requests of TRAJGRAPH_LLM_PACK_TOKENS);
* one window per request (no packing: every observation is sent twice, the prompt per window);
* a re-run of the packed configuration with the cache (should send nothing).

Goal: packed ratio <= 1.3.

    python -m bench.llm_tokens [--shared DIR] [--budget 2048] [--pack-tokens 8000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tests.fake_openai import FakeOpenAI
from trajgraph.core.settings import LLMSettings
from trajgraph.core.tokens import count_tokens
from trajgraph.extractors.llm import LLMExtractor
from trajgraph.extractors.windows import build_windows
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.preflight import expand_paths

REPO = Path(__file__).resolve().parent.parent
GOAL = 1.3


def load_trajectories(shared: Path) -> list[dict[str, Any]]:
    out = []
    for path in expand_paths([str(shared)]):
        data = Path(path).read_bytes()
        for record in split_records(path, data, None, max_record_bytes=1 << 30):
            out.extend(normalize(record))
    return out


def trajectory_tokens(traj: dict[str, Any]) -> int:
    turns = traj.get("turns") or []
    return count_tokens(str(traj.get("task") or "")) + sum(
        count_tokens(t.get("action") or "") + count_tokens(t.get("observation") or "")
        for t in turns
    )


def measure(
    trajectories: list[dict[str, Any]], settings: LLMSettings, fake: FakeOpenAI, budget: int
) -> dict[str, int]:
    fake.reset()
    ex = LLMExtractor(settings)
    stats: dict[str, int] = {}
    try:
        for traj in trajectories:
            windows = build_windows(traj, budget_tokens=budget)
            ex.extract_windows(windows, task=str(traj.get("task") or ""))
            for k, v in ex.drain_stats().items():
                stats[k] = stats.get(k, 0) + v
    finally:
        ex.close()
    stats["server_requests"] = len(fake.chat_requests)
    stats["server_prompt_tokens"] = fake.prompt_tokens
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="prompt tokens sent / trajectory tokens")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "trajectories")
    p.add_argument("--budget", type=int, default=2048, help="window token budget")
    p.add_argument("--pack-tokens", type=int, default=LLMSettings().pack_tokens)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    trajectories = load_trajectories(args.shared)
    traj_tokens = sum(trajectory_tokens(t) for t in trajectories)
    turns = sum(len(t.get("turns") or []) for t in trajectories)
    rows = {}
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as tmp:
        base = LLMSettings(model="bench-model", base_url=fake.url, api_key="bench", timeout_s=30)
        cached = LLMSettings(
            **{**base.__dict__, "pack_tokens": args.pack_tokens, "cache_path": Path(tmp) / "c.db"}
        )
        rows["packed"] = measure(trajectories, cached, fake, args.budget)
        unpacked = LLMSettings(**{**base.__dict__, "pack_tokens": 1})
        rows["one window per request"] = measure(trajectories, unpacked, fake, args.budget)
        rows["packed, re-run (cache)"] = measure(trajectories, cached, fake, args.budget)

    result: dict[str, Any] = {
        "trajectories": len(trajectories),
        "turns": turns,
        "trajectory_tokens": traj_tokens,
        "goal_ratio": GOAL,
        "runs": {
            name: {
                "requests": r["server_requests"],
                "prompt_tokens": r["server_prompt_tokens"],
                "ratio": round(r["server_prompt_tokens"] / traj_tokens, 3),
                "completion_tokens": r.get("llm_completion_tokens", 0),
                "cache_hits": r.get("llm_cache_hits", 0),
                "client_prompt_tokens": r.get("llm_prompt_tokens_local", 0),
            }
            for name, r in rows.items()
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{len(trajectories)} trajectories, {turns} turns, {traj_tokens} tokens "
            f"(task + actions + observations); window budget {args.budget}, "
            f"pack {args.pack_tokens} tokens"
        )
        print(f"{'configuration':<26}{'requests':>9}{'prompt tok':>12}{'ratio':>8}{'cached':>8}")
        for name, r in result["runs"].items():
            print(
                f"{name:<26}{r['requests']:>9}{r['prompt_tokens']:>12}{r['ratio']:>8.3f}"
                f"{r['cache_hits']:>8}"
            )
        packed = result["runs"]["packed"]["ratio"]
        print(f"goal: packed ratio <= {GOAL}: {'met' if packed <= GOAL else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
