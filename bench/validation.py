"""Validating one canonical trajectory: jsonschema (the reference implementation, which now
only words an error) against the compiled validator validate() runs (fastjsonschema), side by
side in one run, with json.loads of the same record for scale.

    python -m bench.validation [--turns 2000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from trajgraph.schemas import trajectory


def record(turns: int) -> dict[str, Any]:
    """A trajectory of ``turns`` turns shaped like a SWE-agent run's (short actions, longer
    observations)."""
    return {
        "id": "bench-validation",
        "task": "Make the failing test pass.",
        "source": "bench.jsonl",
        "format": "canonical",
        "metadata": {"model": "bench"},
        "turns": [
            {
                "idx": i,
                "action": f"python -m pytest tests/test_{i % 40}.py -x -q",
                "observation": f"FAILED tests/test_{i % 40}.py::test_case - AssertionError\n" * 8,
                "thought": "Run the tests again after the edit.",
                "timestamp": "2025-11-18T23:52:40Z",
            }
            for i in range(turns)
        ],
    }


def timed(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm: compiled once, caches filled
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.validation", description=__doc__)
    p.add_argument("--turns", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    rec = record(args.turns)
    text = json.dumps(rec)
    reference = trajectory._validator()
    rows = {
        "json.loads": timed(lambda: json.loads(text), args.repeat),
        "jsonschema (reference)": timed(lambda: list(reference.iter_errors(rec)), args.repeat),
        "validate() (compiled)": timed(lambda: trajectory.validate(copy.copy(rec)), args.repeat),
    }
    print(f"one trajectory of {args.turns} turns ({len(text) / 1e6:.1f} MB JSON), median ms:")
    for name, ms in rows.items():
        print(f"  {name:24} {ms:8.1f} ms")
    ratio = rows["jsonschema (reference)"] / rows["validate() (compiled)"]
    print(f"  validate() is {ratio:.1f}x faster than jsonschema")


if __name__ == "__main__":
    main()
