"""bench/startup.py: every row runs in a fresh process per version, and a row that cannot
import in a checkout stops the bench naming that checkout (a silent zero would pass for fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import startup


def test_every_row_is_timed_once_per_version_and_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "ROWS", {"floor": "pass", "json": "import json"})
    times = startup.measure([("a", None), ("b", None)], repeats=2)
    assert set(times) == {"floor", "json"}
    for row in times.values():
        assert set(row) == {"a", "b"}
        assert all(len(samples) == 2 and min(samples) > 0 for samples in row.values())


def test_a_checkout_that_cannot_import_a_row_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=str(tmp_path)):
        startup._once("import trajgraph_no_such_module", tmp_path)


def test_the_p95_of_twenty_samples_is_the_nineteenth() -> None:
    assert startup._p95([float(i) for i in range(1, 21)]) == 19.0


def test_the_hook_row_imports_what_each_checkouts_console_script_imports(tmp_path: Path) -> None:
    assert startup.hook_imports(None) == (
        "import trajgraph.console, trajgraph.hooks.command, trajgraph.core.printable"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[project.scripts]\ntrajgraph = "trajgraph.cli:main"\n'
    )
    assert startup.hook_imports(tmp_path) == "import trajgraph.cli"  # a checkout without them
    (tmp_path / "trajgraph" / "hooks").mkdir(parents=True)
    (tmp_path / "trajgraph" / "hooks" / "claude_code.py").write_text("")
    assert startup.hook_imports(tmp_path) == "import trajgraph.cli, trajgraph.hooks.claude_code"
