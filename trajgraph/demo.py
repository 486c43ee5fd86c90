"""``trajgraph demo``: start the local Neo4j, ingest a small trajectory this project wrote,
and print the why-chain of its last test run. The sample is generated here, not shipped data."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trajgraph.core.settings import Settings

DEMO_ID = "demo-fix-failing-test"
WHY_TURN = 5


def sample_trajectory() -> dict[str, Any]:
    """An agent finds why a test fails, fixes the code, and re-runs the tests."""
    turns = [
        ("ls src tests", "src:\ncalc.py\n\ntests:\ntest_calc.py", "Look at the layout first."),
        (
            "python -m pytest tests/test_calc.py -q",
            "F.                                                                  [100%]\n"
            "=================================== FAILURES ===================================\n"
            "_________________________________ test_divide __________________________________\n"
            "    def test_divide():\n"
            ">       assert divide(6, 3) == 2\n"
            "src/calc.py:5: in divide\n"
            "    return str(a) / b\n"
            "E   TypeError: unsupported operand type(s) for /: 'str' and 'int'\n"
            "=========================== short test summary info ============================\n"
            "FAILED tests/test_calc.py::test_divide - "
            "TypeError: unsupported operand type(s) for /: 'str' and 'int'\n"
            "1 failed, 1 passed in 0.02s\n"
            "exit code: 1",
            "Run the tests to see what fails.",
        ),
        (
            "sed -n '1,8p' src/calc.py",
            "def add(a, b):\n    return a + b\n\n\ndef divide(a, b):\n    return str(a) / b\n",
            "The traceback points at src/calc.py line 5.",
        ),
        (
            "sed -i 's|return str(a) / b|return a / b|' src/calc.py",
            "exit code: 0",
            "divide() converts a to str by mistake; remove the conversion.",
        ),
        (
            "git diff src/calc.py",
            "diff --git a/src/calc.py b/src/calc.py\n--- a/src/calc.py\n+++ b/src/calc.py\n"
            "@@ -5,2 +5,2 @@\n def divide(a, b):\n-    return str(a) / b\n+    return a / b\n",
            "Check the change.",
        ),
        (
            "python -m pytest tests/test_calc.py -q",
            "..                                                                  [100%]\n"
            "2 passed in 0.01s\n"
            "exit code: 0",
            "Re-run the tests.",
        ),
    ]
    return {
        "id": DEMO_ID,
        "task": "tests/test_calc.py::test_divide fails with a TypeError; make the tests pass.",
        "source": "trajgraph-demo",
        "format": "canonical",
        "outcome": "submitted",
        "metadata": {"written_by": "trajgraph demo"},
        "turns": [
            {"idx": i, "action": a, "observation": o, "thought": t, "actor": "agent"}
            for i, (a, o, t) in enumerate(turns)
        ],
    }


def write_sample(folder: Path) -> Path:
    path = folder / f"{DEMO_ID}.jsonl"
    path.write_text(json.dumps(sample_trajectory()) + "\n", encoding="utf-8")
    return path


def command(argv0: str | None = None) -> str:
    """The trajgraph command as this user can type it again: ``trajgraph`` when PATH finds
    the script that runs, else its path (relative below the working directory, e.g.
    ``.venv/bin/trajgraph`` in a checkout), or ``python -m trajgraph``."""
    script = Path(sys.argv[0] if argv0 is None else argv0).absolute()
    if script.name != "trajgraph":
        return "python -m trajgraph"
    found = shutil.which("trajgraph")
    if found and Path(found).absolute() == script:
        return "trajgraph"
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)


def run(settings: Settings, *, start_server: bool = True) -> int:
    from trajgraph.client import TrajGraph
    from trajgraph.graph import local_server
    from trajgraph.jobs import ingest
    from trajgraph.queries.why import render_text

    if start_server:
        st = local_server.start(settings.neo4j, settings.local)
        print(f"Neo4j {settings.local.version} running at {st.bolt_uri} (pid {st.pid})")
    with tempfile.TemporaryDirectory(prefix="trajgraph-demo-") as tmp:
        sample = write_sample(Path(tmp))
        summary = ingest.run(
            [
                str(sample),
                "--extractor",
                "heuristic",  # the embedded default is offline, even where an LLM is configured
                "--dead-letter",
                str(Path(tmp) / "dead-letter"),
                "--progress",
                "off",
            ],
            settings=settings,
        )
    print(summary.render())
    with TrajGraph.from_settings(settings) as tg:
        chain = tg.why(DEMO_ID, turn=WHY_TURN, depth=6)
    print()
    print(render_text(chain, trajectory=DEMO_ID, target=f"turn {WHY_TURN}", depth=6))
    cmd = command()
    print(
        f"\nTry: {cmd} why --trajectory {DEMO_ID} --turn 1"
        f'\n     {cmd} search "Why did the test fail?" --trajectory {DEMO_ID}'
        f"\nStop Neo4j with: {cmd} neo4j stop"
    )
    return 0 if summary.balanced and chain else 1
