"""Format adapters against the real logs in ../shared/trajectories and synthetic edge cases.

Expected counts and strings were read from the files with jq, independently of the adapters:
  swe-agent:      jq '.trajectory|length'                                   -> 12
  mini-swe-agent: jq '[.messages[]|select(.role=="assistant")]|length'      -> 17
  openhands:      agent/user actions minus change_agent_state, minus the task message -> 5
  spider-agent:   tool calls + text-only assistant messages                 -> 25
  tau-bench:      tool calls + text-only assistant messages + opening user message -> 16/6/12
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.trajectories import ama_episode
from trajgraph.core.errors import ConfigError, InputError
from trajgraph.pipelines.adapters import FORMATS, OversizeRecord, normalize, split_records
from trajgraph.pipelines.adapters.base import RawRecord
from trajgraph.schemas.parquet import to_arrow
from trajgraph.schemas.trajectory import validate

SWE = "swe-agent/pydicom__pydicom-1458.traj"
MINI = "mini-swe-agent/django__django-16255.traj.json"
OPENHANDS = "openhands/basic_gui_mode.json"
SPIDER = "spider-agent/sf_bq024.json"
TAU = "tau-bench/gpt-4o-airline.excerpt_tasks0-1-6_trial0.json"
TAU_STEM = "gpt-4o-airline.excerpt_tasks0-1-6_trial0"
SPIDER_WORKDIR = (
    "/cpfs01/data/shared/Group-m6/fangyu.lfy/Spider2/spider2-snow/resource/databases/USFS_FIA"
)

# file -> (format, [(trajectory id, turn count), ...])
EXPECTED = {
    SWE: ("swe-agent", [("pydicom__pydicom-1458", 12)]),
    MINI: ("mini-swe-agent", [("django__django-16255", 17)]),
    OPENHANDS: ("openhands", [("basic_gui_mode", 5)]),
    SPIDER: ("spider-agent", [("sf_bq024-rollout0", 25)]),
    TAU: (
        "tau-bench",
        [
            (TAU_STEM + "/task0-trial0", 16),
            (TAU_STEM + "/task1-trial0", 6),
            (TAU_STEM + "/task6-trial0", 12),
        ],
    ),
}


def load(path: Path, fmt: str | None = None) -> tuple[list[RawRecord], list[dict[str, Any]]]:
    records = list(split_records(str(path), path.read_bytes(), fmt))
    trajs = [t for rec in records for t in normalize(rec)]
    return records, trajs


@pytest.fixture(scope="module")
def real(shared_dir: Path) -> dict[str, tuple[list[RawRecord], list[dict[str, Any]]]]:
    return {name: load(shared_dir / name) for name in EXPECTED}


# ------------------------------------------------------------------------- real files


@pytest.mark.parametrize("name", list(EXPECTED))
def test_real_file_format_ids_turn_counts_and_schema(real, shared_dir, name):
    records, trajs = real[name]
    fmt, expected = EXPECTED[name]
    assert {r.format for r in records} == {fmt}
    assert [(t["id"], len(t["turns"])) for t in trajs] == expected
    for t in trajs:
        assert t["source"] == str(shared_dir / name)
        assert t["format"] == fmt
        assert "tenant" not in t
        assert [turn["idx"] for turn in t["turns"]] == list(range(len(t["turns"])))
        json.dumps(t)  # metadata must be JSON-serializable
        validate(copy.deepcopy(t))


def test_swe_agent(real):
    records, [t] = real[SWE]
    assert records[0].locator == "file"
    assert t["task"].startswith("Pixel Representation attribute should be optional")
    assert t["task"].endswith(
        "np.array_equal(ds.pixel_array, pixel_array)\r\n```"
    )  # CRLF kept verbatim
    assert "INSTRUCTIONS:" not in t["task"] and "demonstration" not in t["task"]
    assert t["outcome"] == "submitted"
    turns = t["turns"]
    assert turns[2]["action"] == "python reproduce_bug.py\n"
    assert turns[3]["action"] == 'find_file "numpy_handler.py"\n'
    assert turns[9]["observation"] == "Script completed successfully, no errors. Result: True\n"
    assert turns[10]["action"] == "rm reproduce_bug.py\n"
    assert turns[10]["observation"] == ""
    assert turns[0]["thought"].startswith("First, I'll create a new Python script")
    assert t["metadata"]["model_stats"]["api_calls"] == 12


def test_mini_swe_agent(real):
    _, [t] = real[MINI]
    assert t["task"].startswith("Sitemaps without items raise ValueError on callable lastmod.")
    assert "<pr_description>" not in t["task"] and "</pr_description>" not in t["task"]
    assert t["outcome"] == "Submitted"
    assert t["metadata"]["model"] == "google/gemini-3-pro-preview"
    turns = t["turns"]
    assert turns[0]["action"] == "ls -R django/contrib/sitemaps"
    assert turns[0]["timestamp"] == "2025-11-18T23:52:40Z"  # created 1763509960
    assert turns[3]["action"] == "python3 reproduce_issue.py"
    assert turns[3]["thought"] == (
        "Now I will run the reproduction script to confirm the `ValueError`."
    )
    assert turns[3]["observation"] == (
        "<returncode>0</returncode>\n<output>\nAttempting to get latest lastmod...\n"
        "Caught expected ValueError: max() arg is an empty sequence\n</output>"
    )
    assert turns[4]["action"] == (
        "sed -i '171s/except TypeError:/except (TypeError, ValueError):/' "
        "django/contrib/sitemaps/__init__.py"
    )
    assert turns[16]["observation"].startswith("diff --git a/django/contrib/sitemaps/__init__.py")


def test_openhands(real):
    _, [t] = real[OPENHANDS]
    assert t["task"].startswith("I want to create a VueJS app that allows me to:")
    assert t["outcome"] == "awaiting_user_input"
    turns = t["turns"]
    assert turns[0]["action"] == "mkdir -p /workspace/todo-app"
    assert turns[0]["observation"] == "\n[The command completed with exit code 0.]"
    assert turns[0]["timestamp"] == "2025-01-20T20:29:35.040676"
    assert turns[0]["actor"] == "agent"
    assert turns[1]["action"].startswith("create /workspace/todo-app/index.html\n<!DOCTYPE html>")
    assert turns[1]["observation"] == "File created successfully at: /workspace/todo-app/index.html"
    assert turns[1]["thought"] == "Let's create the main HTML file:"
    assert turns[3]["action"] == "cd /workspace/todo-app && python3 -m http.server 8000"
    assert turns[3]["observation"].startswith(
        "Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ..."
    )
    assert turns[4]["action"].startswith("I've created a complete Vue.js todo application")
    assert turns[4]["observation"] == ""


def test_spider_agent(real):
    records, [t] = real[SPIDER]
    assert [r.locator for r in records] == ["item 0"]
    assert t["task"].startswith("Question: For the year 2012, which top 10 evaluation groups")
    assert t["outcome"] == "not terminated"
    turns = t["turns"]
    assert turns[0]["action"] == (
        'execute_bash({"command": "ls USFS_FIA", "work_dir": "' + SPIDER_WORKDIR + '"})'
    )
    assert turns[0]["observation"].startswith(
        "EXECUTION RESULT of [execute_bash]:\nCONDITION.json\n"
    )
    assert (
        turns[9]["observation"] == "EXECUTION RESULT of [execute_bash]:\nCommand execution failed"
    )
    assert turns[22]["action"].startswith(
        'execute_snowflake_sql({"sql": "SELECT DISTINCT peg.\\"evaluation_group\\"'
    )
    assert turns[22]["observation"].startswith(
        "EXECUTION RESULT of [execute_snowflake_sql]:\nSQL Error: 000904 (42000)"
    )
    assert turns[1]["thought"] == (
        "Let's first look at the DDL.csv to understand the schema structure:"
    )


def test_tau_bench(real):
    records, trajs = real[TAU]
    assert [r.locator for r in records] == ["item 0", "item 1", "item 2"]
    first, second, third = trajs
    assert first["task"].startswith("You are mia_li_3668. You want to fly from New York to Seattle")
    assert [t["outcome"] for t in trajs] == ["0.0", "0.0", "1.0"]
    turns = first["turns"]
    assert turns[0]["actor"] == "user"
    assert turns[0]["action"] == (
        "Hi! I'm looking to book a flight from New York to Seattle on May 20th."
    )
    assert turns[1]["actor"] == "agent"
    assert turns[1]["observation"] == "Sure, my user ID is mia_li_3668."
    assert turns[3]["action"] == 'get_user_details({"user_id":"mia_li_3668"})'
    # calls 6 and 12 reuse earlier call ids: each still gets its own result
    assert turns[6]["action"].startswith("search_onestop_flight(")
    assert turns[6]["observation"].startswith('[[{"flight_number": "HAT057", "origin": ')
    assert turns[8]["action"] == 'calculate({"expression":"152 + 103"})'
    assert turns[8]["observation"] == "255.0"
    assert turns[10]["observation"] == (
        "Error: payment amount does not add up, total price is 305, but paid 255"
    )
    assert turns[11]["action"].startswith('think({"thought":')
    assert turns[11]["observation"] == ""
    assert turns[15]["observation"] == "Thank you so much for your help! ###STOP###"
    assert second["turns"][5]["observation"] == "Thank you! ###STOP###"
    assert third["turns"][2]["action"] == 'get_user_details({"user_id":"aarav_garcia_1177"})'


def test_explicit_format_on_real_file(shared_dir):
    _, trajs = load(shared_dir / MINI, "mini-swe-agent")
    assert len(trajs[0]["turns"]) == 17
    with pytest.raises(InputError, match="does not fit"):
        list(split_records(str(shared_dir / MINI), (shared_dir / MINI).read_bytes(), "openhands"))


# ------------------------------------------------------------------------- synthetic


def canonical_traj(ident: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "task": "fix it",
        "source": "orig.log",
        "format": "canonical",
        "metadata": {"k": 1},
        "turns": [
            {"idx": 0, "action": "ls", "observation": "a b"},
            {"idx": 1, "action": "cat a", "observation": "x", "thought": "look", "actor": "agent"},
        ],
        **extra,
    }


AMA = ama_episode(
    "ep-7",
    "find the key",
    "textworld",
    [("go north", "A hall."), ("take key", "Taken.")],
    qa_pairs=[{"question": "where?", "answer": "hall"}],
)


def test_canonical_jsonl_bad_lines_fail_alone(tmp_path):
    good = json.dumps(canonical_traj("a", tenant="acme"))
    text = "\n".join([good, "", good[:40], "[1, 2]", json.dumps(canonical_traj("b"))]) + "\n"
    path = tmp_path / "batch.jsonl"
    path.write_text(text)
    records = list(split_records(str(path), path.read_bytes()))
    assert [r.locator for r in records] == ["line 1", "line 3", "line 4", "line 5"]
    assert all(isinstance(r.payload, bytes) and r.format is None for r in records)
    ok = normalize(records[0])[0]
    assert ok["id"] == "a" and ok["tenant"] == "acme" and ok["source"] == "orig.log"
    assert normalize(records[3])[0]["id"] == "b"
    with pytest.raises(InputError) as truncated:
        normalize(records[1])
    assert truncated.value.locator == "line 3" and "invalid JSON" in truncated.value.reason
    with pytest.raises(InputError) as non_object:
        normalize(records[2])
    assert non_object.value.locator == "line 4" and "JSON object" in non_object.value.reason
    for t in (ok, normalize(records[3])[0]):
        validate(t)


@pytest.mark.parametrize("payload", [b'"x"', b"42", b"null"])
def test_non_object_json_record(payload):
    with pytest.raises(InputError, match="expected a JSON object"):
        normalize(RawRecord("f.jsonl", "line 1", None, payload))


def test_canonical_fills_missing_source_and_format():
    line = json.dumps({"id": "z", "task": "", "metadata": {}, "turns": []}).encode()
    [t] = normalize(RawRecord("dir/f.jsonl", "line 1", None, line))
    assert (t["source"], t["format"], "tenant" in t) == ("dir/f.jsonl", "canonical", False)


def test_invalid_utf8(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"turns": [], "task": "caf\xe9"}')
    with pytest.raises(InputError, match="invalid UTF-8"):
        list(split_records(str(path), path.read_bytes()))
    rec = RawRecord("bad.jsonl", "line 2", None, b'{"task": "\xff"}')
    with pytest.raises(InputError, match="invalid UTF-8") as err:
        normalize(rec)
    assert err.value.locator == "line 2"


def test_unparseable_json_names_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "turns": [\n    {"idx": 0,,}\n')
    with pytest.raises(InputError, match=r"invalid JSON at line 3 column \d+"):
        list(split_records(str(path), path.read_bytes()))


def test_unknown_format_names_file_and_keys(tmp_path):
    path = tmp_path / "weird.json"
    path.write_text(json.dumps({"hello": 1, "world": [2]}))
    with pytest.raises(InputError) as err:
        list(split_records(str(path), path.read_bytes()))
    assert "weird.json" in str(err.value)
    assert "hello, world" in err.value.reason and "tried" in err.value.reason
    line = RawRecord("x.jsonl", "line 9", None, b'{"hello": 1}')
    with pytest.raises(InputError, match="unknown trajectory format") as err2:
        normalize(line)
    assert err2.value.locator == "line 9"


def test_explicit_format_mismatch_and_bad_name(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(canonical_traj("a")))
    with pytest.raises(InputError, match="'openhands' does not fit"):
        list(split_records(str(path), path.read_bytes(), "openhands"))
    with pytest.raises(ConfigError):
        list(split_records(str(path), path.read_bytes(), "nope"))
    [rec] = split_records(str(path), path.read_bytes(), "canonical")
    assert (rec.locator, rec.format) == ("file", "canonical")


def test_json_array_of_canonical_and_ama(tmp_path):
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([canonical_traj("a"), AMA, {"junk": True}]))
    records = list(split_records(str(path), path.read_bytes()))
    assert [(r.locator, r.format) for r in records] == [
        ("item 0", "canonical"),
        ("item 1", "ama-bench"),
        ("item 2", None),
    ]
    assert normalize(records[0])[0]["id"] == "a"
    assert normalize(records[1])[0]["id"] == "ep-7"
    with pytest.raises(InputError) as err:
        normalize(records[2])
    assert err.value.locator == "item 2"


def test_ama_bench_json_and_jsonl(tmp_path):
    single = tmp_path / "episode.json"
    single.write_text(json.dumps(AMA))
    [rec] = split_records(str(single), single.read_bytes())
    [t] = normalize(rec)
    assert (rec.format, rec.locator, t["id"], t["task"]) == (
        "ama-bench",
        "file",
        "ep-7",
        "find the key",
    )
    assert [(x["idx"], x["action"], x["observation"]) for x in t["turns"]] == [
        (0, "go north", "A hall."),
        (1, "take key", "Taken."),
    ]
    assert t["metadata"] == {"domain": "textworld", "qa_count": 1, "qa_pairs": AMA["qa_pairs"]}
    validate(t)

    lines = tmp_path / "episodes.jsonl"
    second = {**AMA, "episode_id": "ep-8", "qa_pairs": [{"q": "x" * 5000}]}
    lines.write_text(json.dumps(AMA) + "\n" + json.dumps(second) + "\n")
    trajs = [t for r in split_records(str(lines), lines.read_bytes()) for t in normalize(r)]
    assert [t["id"] for t in trajs] == ["ep-7", "ep-8"]
    assert trajs[1]["metadata"]["qa_count"] == 1 and "qa_pairs" not in trajs[1]["metadata"]


def test_parquet_round_trip(tmp_path):
    originals = [canonical_traj("a", tenant="acme", outcome="ok"), canonical_traj("b")]
    path = tmp_path / "trajs.parquet"
    pq.write_table(to_arrow(copy.deepcopy(originals)), path)  # type: ignore[arg-type]
    records = list(split_records(str(path), path.read_bytes()))
    assert [(r.locator, r.format) for r in records] == [("row 0", "parquet"), ("row 1", "parquet")]
    back = [t for r in records for t in normalize(r)]
    assert back[0] == originals[0]
    assert back[1] == {**originals[1], "outcome": None, "tenant": "default"}
    for t in back:
        validate(t)


def test_unreadable_parquet(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 not really parquet PAR1")
    with pytest.raises(InputError, match="unreadable Parquet"):
        list(split_records(str(path), path.read_bytes()))


def test_oversize_records(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps(canonical_traj("a")))
    with pytest.raises(InputError, match="over the 100-byte limit"):
        list(split_records(str(big), big.read_bytes(), max_record_bytes=100))
    lines = tmp_path / "big.jsonl"
    small = json.dumps({"id": "s", "task": "", "metadata": {}, "turns": []})
    lines.write_text(json.dumps(canonical_traj("a")) + "\n" + small + "\n")
    records = list(split_records(str(lines), lines.read_bytes(), max_record_bytes=100))
    assert isinstance(records[0].payload, OversizeRecord)
    with pytest.raises(InputError, match="over the 100-byte limit") as err:
        normalize(records[0])
    assert err.value.locator == "line 1"
    assert normalize(records[1])[0]["id"] == "s"
    with pytest.raises(InputError, match="over the 10-byte limit"):
        normalize(RawRecord("x.jsonl", "line 1", None, small.encode()), max_record_bytes=10)


def test_json_file_holding_jsonl_is_split_by_line(tmp_path):
    path = tmp_path / "actually_lines.json"
    path.write_text(json.dumps(AMA) + "\n" + json.dumps({**AMA, "episode_id": "ep-9"}) + "\n")
    records = list(split_records(str(path), path.read_bytes()))
    assert [r.locator for r in records] == ["line 1", "line 2"]


def test_id_falls_back_to_file_stem():
    episode = {
        "task": "t",
        "trajectory": [{"turn_idx": 0, "action": "a", "observation": "o"}],
        "qa_pairs": [],
    }
    [t] = normalize(RawRecord("/logs/run_3.traj.json", "file", None, episode))
    assert t["id"] == "run_3"


def test_formats_match_schema_enum():
    from trajgraph.schemas.trajectory import json_schema

    enum = json_schema()["properties"]["format"]["enum"]
    assert set(FORMATS) <= set(enum)
