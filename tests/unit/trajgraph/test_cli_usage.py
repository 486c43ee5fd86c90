"""`trajgraph --help` lists every command the CLI accepts (users find commands there)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from trajgraph import cli


def test_usage_lists_every_subcommand() -> None:
    subparsers = next(
        a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    listed = set(re.findall(r"^  ([a-z0-9-]+)\b", cli.USAGE, flags=re.MULTILINE))
    missing = sorted(set(subparsers.choices) - listed)
    assert not missing, f"trajgraph --help does not list {missing}"
    # `hook` is dispatched before argparse (trajgraph.cli._hook): it must be listed too.
    assert "hook" in listed


def test_subcommand_help_starts_with_its_own_usage() -> None:
    # `trajgraph why --help` must not print the whole command list before its own usage.
    subparsers = next(
        a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    for name, parser in subparsers.choices.items():
        usage = parser.format_usage()
        assert usage.split()[:3] == ["usage:", "trajgraph", name], (name, usage[:200])
        assert "commands:" not in usage, name


def test_hook_claude_code_help_lists_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # The hook swallows bad flags (it must never block the agent), but --help is asked by a
    # person: it prints the flags docs/hooks.md documents and exits 0.
    assert cli.main(["hook", "claude-code", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--decision", "--tenant", "--budget-ms", "--no-start", "--in-process"):
        assert flag in out, flag


def test_text_rows_are_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    # `trajgraph trajectories` and `trajgraph cypher NAME`: a task or an action holding
    # newlines must not spread one row over many lines (grep, wc -l, the "(N rows)" count).
    rows: list[dict[str, object]] = [
        {"id": "a", "task": "line one\nline two\r\nthree", "turns": 2},
        {"id": "b"},
    ]
    assert cli._print_rows(rows, as_json=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["id=a  task=line one\\nline two\\r\\nthree  turns=2", "id=b", "(2 rows)"]


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    import trajgraph

    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"trajgraph {version('trajgraph')}\n"
    assert trajgraph.__version__ == version("trajgraph")


def test_demo_hints_name_the_command_as_the_user_can_type_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An installed user has no .venv/bin/trajgraph; a checkout's demo (deploy/dev.sh) does.
    from trajgraph import demo

    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "trajgraph"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(bindir))
    assert demo.command(str(script)) == "trajgraph"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert demo.command(str(script)) == "venv/bin/trajgraph"
    assert demo.command("/opt/tg/bin/trajgraph") == "/opt/tg/bin/trajgraph"
    assert demo.command("/site-packages/trajgraph/__main__.py") == "python -m trajgraph"
