"""A real model as the extractor, side by side with the heuristic on the same real windows.

Per model (the embedded SmolLM2-135M by default; ``--url`` and ``--model`` for any
OpenAI-compatible server, ``--gguf`` for another GGUF file served by a private local server),
on a fixed sample of real windows (the first ``--windows-per-log`` windows of each log in
``../shared/trajectories``, one window per request, no cache):

* seconds per window, prompt and completion tokens per window;
* the share of replies valid on the first try (no repair, not cut off), repaired, salvaged
  after a cut-off, and replaced by the heuristic;
* the share of identifiers and values rejected as not verbatim;
* states and objects per window from the model, against the heuristic on the same windows;
* the structured-output dialect the server accepted, and how many formats it refused.

With ``--ama N`` it also ingests the N smallest episodes of ``../shared/ama-dev`` twice (LLM
extractor, heuristic extractor) and prints retrieval coverage (``trajgraph_auto``, the
harness's answer-term coverage at ``--budget``) for each: what LLM-extracted states change
for retrieval. That part is slow with a CPU model (every window of every episode is a
request); the default is off.

    python -m bench.llm_real [--windows-per-log 2] [--ama 1] [--url URL --model NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from trajgraph.core.settings import LLMSettings, load, local_llm_endpoint
from trajgraph.extractors import local_llm
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.llm import LLMExtractor
from trajgraph.extractors.structured import NEGOTIATOR
from trajgraph.extractors.windows import Window, build_windows
from trajgraph.pipelines.adapters import normalize, split_records

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def sample_windows(root: Path, per_log: int, budget: int) -> list[tuple[str, Window]]:
    """The first ``per_log`` windows of every trajectory file under ``root`` (sorted)."""
    out: list[tuple[str, Window]] = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md"):
        for record in split_records(str(f), f.read_bytes()):
            for traj in normalize(record):
                for w in build_windows(traj, budget_tokens=budget)[:per_log]:
                    out.append((str(traj.get("task", "")), w))
                break  # the first trajectory of a file: a fixed sample across formats
            break
    return out


def measure(llm: LLMSettings, windows: list[tuple[str, Window]]) -> dict[str, Any]:
    ex = LLMExtractor(llm, use_cache=False)
    heur = HeuristicExtractor()
    secs: list[float] = []
    llm_states = llm_objects = heur_states = heur_objects = by_llm = 0
    totals: dict[str, int] = {}
    try:
        for task, w in windows:
            t0 = time.perf_counter()
            batch = ex.extract_windows([w], task=task)
            secs.append(time.perf_counter() - t0)
            for k, v in ex.drain_stats().items():
                totals[k] = totals.get(k, 0) + v
            (found,) = batch.extractions
            if found.extractor.startswith("llm:"):
                by_llm += 1
                llm_states += len(found.states)
                llm_objects += len(found.objects)
            h = heur.extract(w)
            heur_states += len(h.states)
            heur_objects += len(h.objects)
            print(f"  turn {w.turn} of {w.trajectory_id}: {secs[-1]:.1f} s, {found.extractor}",
                  file=sys.stderr)  # fmt: skip
    finally:
        ex.close()
    n = len(windows)
    first_try = n - totals.get("llm_repairs", 0) - totals.get("llm_truncated", 0)
    kept = llm_states + llm_objects
    rejected = totals.get("llm_rejected_identifiers", 0)
    return {
        "windows": n,
        "s_per_window_median": statistics.median(secs) if secs else 0.0,
        "s_per_window_mean": statistics.fmean(secs) if secs else 0.0,
        "prompt_tokens_per_window": totals.get("llm_prompt_tokens", 0) / max(n, 1),
        "completion_tokens_per_window": totals.get("llm_completion_tokens", 0) / max(n, 1),
        "valid_first_try": first_try / max(n, 1),
        "repaired": totals.get("llm_repairs", 0),
        "truncated_salvaged": totals.get("llm_truncated_repaired", 0),
        "heuristic_instead": totals.get("llm_fallbacks", 0),
        "windows_by_llm": by_llm,
        "rejected_not_verbatim_share": rejected / max(kept + rejected, 1),
        "rejected_refs": totals.get("llm_rejected_refs", 0),
        "llm_states_per_window": llm_states / max(by_llm, 1),
        "llm_objects_per_window": llm_objects / max(by_llm, 1),
        "heuristic_states_per_window": heur_states / max(n, 1),
        "heuristic_objects_per_window": heur_objects / max(n, 1),
        "formats": {
            k[len("llm_format_") :]: v for k, v in totals.items() if k.startswith("llm_format_")
        },
    }


def ama_coverage(llm: LLMSettings, n: int, budget: int) -> dict[str, float]:
    from trajgraph.evaluation.episodes import episode_files, load_episodes
    from trajgraph.evaluation.harness import evaluate

    files = sorted(episode_files([str(SHARED / "ama-dev")]), key=lambda p: p.stat().st_size)[:n]
    episodes = load_episodes([str(f) for f in files])
    base = load()
    out: dict[str, float] = {}
    for label, settings in (
        ("heuristic", dataclasses.replace(base, llm=LLMSettings())),
        ("llm", dataclasses.replace(base, llm=llm)),
    ):
        t0 = time.perf_counter()
        rows = evaluate(episodes, settings, budget, methods=["trajgraph_auto", "bm25"])
        for method in ("trajgraph_auto", "bm25"):
            scores = [r["coverage"] for r in rows if r["method"] == method]
            out[f"{label}:{method}"] = statistics.fmean(scores) if scores else 0.0
        out[f"{label}:seconds"] = time.perf_counter() - t0
    out["episodes"] = float(len(episodes))
    out["questions"] = float(sum(len(e["qa_pairs"]) for e in episodes))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows-per-log", type=int, default=2)
    p.add_argument("--budget", type=int, default=700, help="tokens of one window")
    p.add_argument("--url", default=None, help="an OpenAI-compatible base URL (default: local)")
    p.add_argument("--model", default=None, help="the model name at --url")
    p.add_argument("--gguf", type=Path, default=None, help="serve this GGUF file locally")
    p.add_argument("--max-output-tokens", type=int, default=384)
    p.add_argument("--ama", type=int, default=0, help="also score retrieval on N episodes")
    p.add_argument("--ama-budget", type=int, default=2000)
    args = p.parse_args(argv)
    settings = load()
    started = False
    if args.url:
        llm = dataclasses.replace(settings.llm, base_url=args.url, model=args.model or "default")
    else:
        local = settings.local_llm
        if args.gguf is not None:  # a private server: the shared one keeps its model
            local = dataclasses.replace(local, port=local.port + 1, run_dir=local.run_dir / "bench")
        started = not local_llm.status(local).running
        local_llm.start(local, model=args.gguf, log=lambda m: print(m, file=sys.stderr))
        llm = local_llm_endpoint(settings.llm, local)
    llm = dataclasses.replace(llm, cache_path=None, max_output_tokens=args.max_output_tokens)
    NEGOTIATOR.forget()
    try:
        windows = sample_windows(SHARED / "trajectories", args.windows_per_log, args.budget)
        print(f"model {llm.model} at {llm.base_url}: {len(windows)} real windows", file=sys.stderr)
        result = measure(llm, windows)
        print(f"\n| {llm.model} | value |\n|---|---:|")
        for k, v in result.items():
            print(f"| {k} | {v:.3f} |" if isinstance(v, float) else f"| {k} | {v} |")
        if args.ama:
            cov = ama_coverage(llm, args.ama, args.ama_budget)
            print("\n| ama-dev (smallest episodes) | value |\n|---|---:|")
            for k, v in cov.items():
                print(f"| {k} | {v:.3f} |")
    finally:
        if started and not args.url:
            local_llm.stop(local)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
