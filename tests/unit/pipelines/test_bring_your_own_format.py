"""The conversions of docs/formats.md "Bring your own format" run exactly as the page shows
them, and what they write is read as canonical trajectories that pass the contract.

The page marks its example inputs with ``<!-- byof-input: NAME -->`` and each conversion with
``<!-- byof-run: INPUT -> OUTPUT, N trajectories, M turns -->`` before the code block.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.schemas.trajectory import Trajectory, validate

DOC = Path(__file__).resolve().parents[3] / "docs" / "formats.md"
BLOCK = re.compile(r"<!-- byof-(input|run): (.*?) -->\n```(\w+)\n(.*?)```", re.S)
RUN = re.compile(r"(\S+) -> (\S+), (\d+) trajector(?:y|ies), (\d+) turns")


def _blocks() -> list[tuple[str, ...]]:
    return [m.groups() for m in BLOCK.finditer(DOC.read_text("utf-8"))]


def _inputs(tmp_path: Path) -> None:
    for kind, name, _, body in _blocks():
        if kind == "input":
            (tmp_path / name).write_text(body, "utf-8")


def _runs() -> list[tuple[str, str, str]]:
    return [(spec, lang, body) for kind, spec, lang, body in _blocks() if kind == "run"]


def _read(path: Path) -> list[Trajectory]:
    out = []
    for record in split_records(str(path), path.read_bytes()):
        for traj in normalize(record):
            out.append(validate(traj, locator=record.locator))
    return out


def _convert(tmp_path: Path, lang: str, body: str, src: str) -> None:
    if lang == "python":
        script = tmp_path / "convert.py"
        script.write_text(body, "utf-8")
        argv = [sys.executable, str(script), src]
    else:
        assert lang == "bash", lang
        argv = ["bash", "-euo", "pipefail", "-c", body]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_page_has_its_examples():
    specs = [spec for spec, _, _ in _runs()]
    assert len(specs) == 2 and all(RUN.fullmatch(s) for s in specs), specs
    assert {lang for _, lang, _ in _runs()} == {"python", "bash"}


@pytest.mark.parametrize("spec,lang,body", _runs(), ids=[s for s, _, _ in _runs()])
def test_documented_conversion_runs_and_is_read(tmp_path, spec, lang, body):
    if lang == "bash" and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    match = RUN.fullmatch(spec)
    assert match is not None, spec
    src, dst, n_traj, n_turns = match.groups()
    _inputs(tmp_path)
    _convert(tmp_path, lang, body, src)
    trajectories = _read(tmp_path / dst)
    assert len(trajectories) == int(n_traj)
    assert sum(len(t["turns"]) for t in trajectories) == int(n_turns)
    for t in trajectories:
        assert t["format"] == "canonical"
        assert [turn["idx"] for turn in t["turns"]] == list(range(len(t["turns"])))
        assert all(isinstance(turn["observation"], str) for turn in t["turns"])


def test_the_canonical_example_is_read_as_shown(tmp_path):
    _inputs(tmp_path)
    (traj,) = _read(tmp_path / "example.jsonl")
    assert traj["id"] == "run-7" and traj["metadata"] == {"model": "my-agent-v3"}
    assert [t["action"] for t in traj["turns"]] == [
        "pytest -x",
        "sed -i s/8080/9090/ app/config.py",
    ]


def test_csv_conversion_keeps_text_verbatim_and_runs_apart(tmp_path):
    (_, lang, body) = next(r for r in _runs() if r[1] == "python")
    _inputs(tmp_path)
    _convert(tmp_path, lang, body, "steps.csv")
    by_id = {t["id"]: t for t in _read(tmp_path / "steps.jsonl")}
    assert sorted(by_id) == ["build-1", "build-2"]
    assert by_id["build-1"]["turns"][1]["observation"] == "ImportError: No module named 'yaml'"
    assert by_id["build-2"]["turns"][0]["action"] == "make"


def test_csv_conversion_reads_tsv(tmp_path):
    (_, lang, body) = next(r for r in _runs() if r[1] == "python")
    _inputs(tmp_path)
    with (tmp_path / "steps.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    with (tmp_path / "steps.tsv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, dialect="excel-tab").writerows(rows)
    _convert(tmp_path, lang, body, "steps.tsv")
    turns = [t for traj in _read(tmp_path / "steps.jsonl") for t in traj["turns"]]
    assert len(turns) == 5
    assert turns[1]["observation"] == "ImportError: No module named 'yaml'"


def test_jq_conversion_keeps_structured_output_as_json_text(tmp_path):
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    (_, lang, body) = next(r for r in _runs() if r[1] == "bash")
    _inputs(tmp_path)
    _convert(tmp_path, lang, body, "run.json")
    (traj,) = _read(tmp_path / "run.jsonl")
    assert traj["id"] == "build-42" and traj["task"] == "Fix the build"
    assert traj["metadata"] == {"model": "my-agent-v3"}
    assert traj["turns"][0]["thought"] == "build first"
    assert traj["turns"][2]["observation"] == '{"exit_code":0}'


def test_the_unconverted_inputs_are_refused_with_the_fix(tmp_path):
    """What a user who skips the conversion sees: the CSV is not JSON, the JSON names the
    field to rename."""
    from trajgraph.core.errors import InputError

    _inputs(tmp_path)
    with pytest.raises(InputError, match=r"does not start like JSON.*bring-your-own-format"):
        list(split_records("steps.csv", (tmp_path / "steps.csv").read_bytes()))
    with pytest.raises(InputError, match="turns under 'steps': rename that key to 'turns'"):
        list(split_records("run.json", (tmp_path / "run.json").read_bytes()))


def test_a_folder_without_logs_says_what_a_folder_walk_reads(tmp_path):
    from trajgraph.core.errors import InputError
    from trajgraph.pipelines.preflight import expand_paths

    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "steps.csv").write_text("action,observation\nls,a\n", "utf-8")
    with pytest.raises(InputError, match=r"searched for \*\.json, \*\.jsonl.*bring-your-own"):
        expand_paths([str(tmp_path / "csv")])
