"""Start-up cost of the processes users start: this checkout against others, in one run.

Each row is a fresh ``python -c`` that imports what one front end imports before it can do
anything (the HTTP API, the MCP server, the CLI, the hook client of the user's agent, the
trajectory schema), timed wall-clock from ``fork`` to exit. The versions are interleaved
repeat by repeat, so a machine that gets busier half-way slows every version alike; a bare
``python -c pass`` is measured the same way as the floor no import can go below.

    python -m bench.startup [--code /tmp/old-checkout ...] [--repeats 30] [--markdown]

With ``--code`` a row also runs from that checkout (in it, and first on ``PYTHONPATH``, as
``bench/hook_replay.py --code`` does), so a change's before and after share the run. The
last column is this checkout's median over the first ``--code`` version's.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What each front end imports before its first useful instruction. HOOK stands for what the
# checkout's console script imports on the way to its hook client (``hook_imports``).
HOOK = "<hook>"
ROWS: dict[str, str] = {
    "python -c pass (the floor)": "pass",
    "hook client (trajgraph hook claude-code)": HOOK,
    "CLI (trajgraph.cli)": "import trajgraph.cli",
    "HTTP API (trajgraph.api)": "import trajgraph.api",
    "MCP server (trajgraph.mcp_server)": "import trajgraph.mcp_server",
    "trajectory schema (trajgraph.schemas.trajectory)": "import trajgraph.schemas.trajectory",
}


def hook_imports(checkout: Path | None) -> str:
    """The console script's module (pyproject's ``[project.scripts]``), the hook client and,
    where the checkout has it, the printable stdout the hook call prints through. Read from
    the checkout's files: an editable install would serve a module the checkout lacks from
    this one, and time a mix of the two versions."""
    root = checkout or REPO
    match = re.search(
        r'^trajgraph\s*=\s*"([\w.]+):', (root / "pyproject.toml").read_text(), re.MULTILINE
    )
    if match is None:
        raise SystemExit(f"{root}: no trajgraph console script in pyproject.toml")
    modules = [match.group(1)]
    for names in (
        ("trajgraph.hooks.command", "trajgraph.hooks.claude_code"),  # the hook client
        ("trajgraph.core.printable", "trajgraph.printable"),
    ):  # each: after / before issue 41
        for module in names:
            if (root / (module.replace(".", "/") + ".py")).exists():
                modules.append(module)
                break
    return "import " + ", ".join(modules)


def _once(code: str, checkout: Path | None) -> float:
    if code == HOOK:
        code = hook_imports(checkout)
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            x for x in (str(checkout), os.environ.get("PYTHONPATH")) if x
        )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=str(checkout or REPO),
        env=env,
        capture_output=True,
        check=False,
    )
    ms = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        where = checkout or REPO
        raise SystemExit(f"{where}: `{code}` failed: {proc.stderr.decode()[-400:]}")
    return ms


def _p95(samples: list[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


def measure(
    versions: Sequence[tuple[str, Path | None]], repeats: int
) -> dict[str, dict[str, list[float]]]:
    times: dict[str, dict[str, list[float]]] = {row: {v: [] for v, _ in versions} for row in ROWS}
    for _name, checkout in versions:  # warm the file cache and .pyc files first
        for code in ROWS.values():
            _once(code, checkout)
    for r in range(repeats):
        order = list(versions) if r % 2 == 0 else list(reversed(versions))
        for row, code in ROWS.items():
            for name, checkout in order:
                times[row][name].append(_once(code, checkout))
    return times


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", type=Path, action="append", default=[], help="another checkout")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    versions: list[tuple[str, Path | None]] = [("this checkout", None)]
    versions += [(str(c), c.resolve()) for c in args.code]
    times = measure(versions, args.repeats)
    names = [v for v, _ in versions]
    head = ["process"] + [f"{n} median / p95 ms" for n in names]
    if len(names) > 1:
        head.append(f"this ÷ {Path(names[1]).name}")
    rows = []
    for row in ROWS:
        cells = [row]
        for n in names:
            t = times[row][n]
            cells.append(f"{statistics.median(t):.1f} / {_p95(t):.1f}")
        if len(names) > 1:
            new = statistics.median(times[row][names[0]])
            old = statistics.median(times[row][names[1]])
            cells.append(f"{new / old:.2f}")
        rows.append(cells)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for cells in rows:
            print("| " + " | ".join(cells) + " |")
    else:
        for cells in [head, *rows]:
            print("  ".join(cells))
    print(f"({args.repeats} runs of each, interleaved; load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
