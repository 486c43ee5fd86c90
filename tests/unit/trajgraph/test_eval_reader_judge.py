"""AMA-Bench's judged protocol (`trajgraph eval --reader URL --judge URL`) against scripted
OpenAI-compatible servers: what the reader and the judge each see, how their replies are read,
what counts as an unusable reply, and what stops the run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, judge_by_reference
from tests.trajectories import canonical_log
from trajgraph import cli
from trajgraph.core.errors import LLMError
from trajgraph.core.settings import LLMSettings, LocalLLMSettings, chat_endpoint
from trajgraph.evaluation import harness
from trajgraph.evaluation.baselines import bm25, long_context, whole_trajectory
from trajgraph.evaluation.harness import subset
from trajgraph.evaluation.judge import ReaderJudge, parse_answer, parse_verdict
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient

EPISODE: dict[str, Any] = canonical_log(
    "ep-1",
    "fix the retries",
    [
        ("cat app.ini", "retries=3\ntimeout=10"),
        ("ls logs", "a.log b.log c.log"),
        ("sed -i s/retries=3/retries=5/ app.ini", ""),
        ("cat app.ini", "retries=5\ntimeout=10"),
    ],
    qa_pairs=[],
)


def _reader(body: dict[str, Any]) -> str:
    """A reader that reads the last retries=N in its prompt, in AMA-Bench's answer slot."""
    found = re.findall(r"retries=\d+", body["messages"][-1]["content"])
    return f"Answer[1]: {found[-1]}" if found else "Answer[1]: not in the context"


def _client(server: FakeOpenAI, **changes: Any) -> ChatClient:
    settings = LLMSettings(
        model="m", base_url=server.url, max_attempts=2, max_backoff_s=0.01, **changes
    )
    return ChatClient(settings, Stats())


def test_each_methods_context_reaches_the_reader_and_only_the_judge_sees_the_gold() -> None:
    scripted = FakeOpenAI(text_reply=judge_by_reference)
    with FakeOpenAI(text_reply=_reader) as reader, scripted as judge:
        grader = ReaderJudge(
            _client(reader, max_output_tokens=64), _client(judge, max_output_tokens=8)
        )
        question = "What is retries set to in app.ini now?"
        contexts = {
            m.__name__: m(EPISODE, question, 60) for m in (long_context, bm25, whole_trajectory)
        }
        graded = {name: grader.grade(question, ctx, "retries=5") for name, ctx in contexts.items()}
        asked = [r.body for r in reader.chat_requests]
        judged = [r.body for r in judge.chat_requests]
    assert len(asked) == len(judged) == 3
    for body, (name, context) in zip(asked, contexts.items(), strict=True):
        prompt = body["messages"][-1]["content"]
        assert prompt.startswith(context + "\n\n## Questions\nQuestion 1: " + question), name
        assert "response_format" not in body  # free text, as the benchmark's reader answers
        assert body["temperature"] == 0 and body["max_tokens"] == 64
        assert "retries=5" not in prompt.replace(context, "")  # the gold answer is not given
    for body, (name, result) in zip(judged, graded.items(), strict=True):
        prompt = body["messages"][-1]["content"]
        assert "Reference Answer: retries=5" in prompt
        assert f"Predicted Answer: {result.answer}" in prompt
        assert contexts[name] not in prompt  # the judge grades the answer, not the evidence
        assert body["temperature"] == 0 and body["max_tokens"] == 8
        assert result.correct is (result.answer == "retries=5")
        assert result.verdict in ("yes", "No") and result.invalid is None
    # whole_trajectory holds the last value; a 60-token long context keeps its head and tail
    assert graded["whole_trajectory"].correct
    assert grader.invalid == 0


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("yes", True),
        ("No.", False),
        ("YES, it matches", True),
        ("The answer is correct, so yes", True),
        ("1. Yes\n2. No", False),  # the last decision counts
        ("<think>it says yes but the value differs</think>\nno", False),
        ("<think>still thinking, yes", None),  # cut inside the thinking: no verdict
        ("Noted; yesterday", None),  # whole words only
        ("maybe", None),
        ("", None),
        (None, None),
    ],
)
def test_the_verdict_is_the_last_whole_word_yes_or_no(reply: str | None, verdict: bool) -> None:
    assert parse_verdict(reply) is verdict


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Answer[1]: retries=5", "retries=5"),
        ("Looking at step 3.\nAnswer[1]: retries=5\n", "retries=5"),
        ("retries=5", "retries=5"),
        ("<think>the edit at step 2</think>Answer[1]: 5", "5"),
        ("Answer[1]: [your answer here]", ""),
        ("   ", ""),
        (None, ""),
    ],
)
def test_the_answer_is_read_from_the_slot(reply: str | None, answer: str) -> None:
    assert parse_answer(reply) == answer


def test_unusable_replies_score_wrong_and_are_counted_by_role() -> None:
    with FakeOpenAI(text_reply=_reader) as reader, FakeOpenAI(text_reply="perhaps") as judge:
        grader = ReaderJudge(_client(reader), _client(judge))
        undecided = grader.grade("retries?", "[turn 3] retries=5", "retries=5")
        reader.script("400")  # e.g. a context past the reader's window: this question only
        rejected = grader.grade("retries?", "[turn 3] retries=5", "retries=5")
        reader.text_reply = ""
        empty = grader.grade("retries?", "[turn 3] retries=5", "retries=5")
        reader.text_reply = _reader
        reader.script("refuse")
        refused = grader.grade("retries?", "[turn 3] retries=5", "retries=5")
        judged = len(judge.chat_requests)
    assert (undecided.correct, undecided.invalid) == (False, "judge")
    assert undecided.answer == "retries=5" and undecided.verdict == "perhaps"
    assert (rejected.correct, rejected.invalid) == (False, "reader")
    assert "400" in rejected.reason
    assert (empty.invalid, refused.invalid) == ("reader", "reader")
    assert judged == 1  # no answer, nothing to judge
    assert grader.invalid == 4
    assert grader.invalid_by == {
        "judge: no yes/no in the reply": 1,
        "reader: the server refused the request": 1,
        "reader: empty answer": 1,
        "reader: the model refused": 1,
    }


def test_a_judge_outage_is_an_error_naming_the_judge_not_a_wrong_answer() -> None:
    with FakeOpenAI(text_reply=_reader) as reader, FakeOpenAI(text_reply="yes") as judge:
        grader = ReaderJudge(_client(reader), _client(judge), where={"judge": f"m at {judge.url}"})
        judge.script("500", "503")  # every attempt (max_attempts=2)
        with pytest.raises(LLMError, match=r"^the judge at m at http://127\.0\.0\.1:\d+/v1 fail"):
            grader.grade("retries?", "[turn 3] retries=5", "retries=5")
        judge.script("401")  # a wrong key: fatal, never a wrong answer
        with pytest.raises(LLMError, match="the judge") as caught:
            grader.grade("retries?", "[turn 3] retries=5", "retries=5")
    assert caught.value.fatal
    assert grader.invalid == 0


def test_local_is_the_embedded_server_and_a_url_is_checked(tmp_path: Path) -> None:
    local = LocalLLMSettings(port=8799, run_dir=tmp_path)
    (tmp_path / "server.json").write_text('{"model": "SmolLM2-135M-Instruct.Q4_1"}')
    served = chat_endpoint("local", model=None, api_key="k", local=local, max_output_tokens=16)
    assert served.base_url == "http://127.0.0.1:8799/v1"
    assert served.model == "SmolLM2-135M-Instruct.Q4_1"
    assert served.api_key is None and served.temperature == 0 and served.max_output_tokens == 16
    (tmp_path / "server.json").unlink()  # not started: the client says to start it
    with pytest.raises(LLMError, match="trajgraph llm start"):
        ChatClient(
            chat_endpoint("local", model="x", api_key=None, local=local, max_output_tokens=8),
            Stats(),
        )
    remote = chat_endpoint(
        "https://llm.example/v1", model=None, api_key="k", local=local, max_output_tokens=8
    )
    assert (remote.base_url, remote.model, remote.api_key) == ("https://llm.example/v1", "", "k")


def _episode_file(tmp_path: Path) -> Path:
    path = tmp_path / "ep.jsonl"
    path.write_text(
        '{"id": "e", "task": "t", "turns": [{"action": "a", "observation": "o"}], '
        '"qa_pairs": [{"question": "q?", "answer": "o", "type": "recall"}]}\n'
    )
    return path


def test_an_unreachable_judge_fails_before_the_ingest_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAI() as gone:
        url = gone.url
    code = cli.main(["eval", str(_episode_file(tmp_path)), "--judge", url])
    err = capsys.readouterr().err
    assert code == 1
    assert f"the reader at {url} is not usable" in err
    assert "Traceback" not in err and "ingesting" not in err


def test_keys_come_from_the_named_variable_and_models_from_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-secret-123456")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY_FILE", raising=False)
    handed: list[Any] = []

    def scored_elsewhere(episodes: Any, settings: Any, budget: int, **kw: Any) -> list[Any]:
        handed.append(kw["judge"])  # the graph part is the integration tests' (test_eval.py)
        return []

    monkeypatch.setattr(harness, "evaluate", scored_elsewhere)
    with FakeOpenAI(text_reply=_reader) as reader, FakeOpenAI(text_reply="yes") as judge:
        code = cli.main(
            [
                *("eval", str(_episode_file(tmp_path)), "--reader", reader.url),
                *("--judge", judge.url, "--judge-key-env", "JUDGE_KEY"),
                *("--reader-model", "reader-7b", "--json"),
            ]
        )
        assert code == 0
        assert handed[0].grade("retries?", "[turn 3] retries=5", "retries=5").correct
        (asked,), (judged,) = reader.chat_requests, judge.chat_requests
        probes = (reader.probes, judge.probes)
    err = capsys.readouterr().err
    assert f"reader: reader-7b at {reader.url}" in err
    assert f"judge: fake at {judge.url}" in err  # the first model GET /models lists
    assert probes == (0, 1)  # only the judge was asked for its model
    assert (asked.body["model"], judged.body["model"]) == ("reader-7b", "fake")
    assert judged.headers["authorization"] == "Bearer sk-judge-secret-123456"
    assert asked.headers["authorization"] == "Bearer not-needed"  # no key for the reader
    assert "sk-judge-secret" not in err
    monkeypatch.delenv("JUDGE_KEY")
    episodes = str(_episode_file(tmp_path))
    code = cli.main(["eval", episodes, "--judge", judge.url, "--judge-key-env", "JUDGE_KEY"])
    assert code == 2
    assert "JUDGE_KEY" in capsys.readouterr().err


def test_endpoint_flags_need_a_judge_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["eval", str(_episode_file(tmp_path)), "--reader", "local"])
    assert exited.value.code == 2
    assert "only with --judge URL" in capsys.readouterr().err


def test_a_subset_takes_questions_in_turn_from_each_capability() -> None:
    types = ["recall"] * 4 + ["causal"] * 3 + ["state_updating"] * 3 + ["state_abstraction"] * 2
    episode = {"qa_pairs": [{"question": f"q{i}", "type": t} for i, t in enumerate(types)]}
    five = subset(episode, 5)["qa_pairs"]
    assert [q["question"] for q in five] == ["q0", "q1", "q4", "q7", "q10"]
    assert {q["type"] for q in five} == set(types)
    assert subset(episode, 50)["qa_pairs"] == episode["qa_pairs"]


def test_judge_alone_is_still_the_configured_llm_and_takes_no_path_for_a_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAJGRAPH_LLM_MODEL", raising=False)
    episodes = str(_episode_file(tmp_path))
    with pytest.raises(SystemExit) as exited:  # `--judge FILE`: the flag, then an episode file
        cli.main(["eval", "--judge", episodes])
    assert exited.value.code == 2
    assert "--judge needs an LLM: set TRAJGRAPH_LLM_MODEL" in capsys.readouterr().err
