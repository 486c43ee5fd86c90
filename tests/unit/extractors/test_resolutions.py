"""Resolutions: episodes of a failure, what got past it, the attempts that did not help, and
key actions; on synthetic turns and on the real runs of the Django corpus."""

from __future__ import annotations

from pathlib import Path

from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.resolutions import (
    Key,
    TurnFacts,
    command_segments,
    episodes,
    is_failure_error,
    salient_tokens,
    same_key,
    share_key_action,
    turn_steps,
)
from trajgraph.extractors.windows import build_windows
from trajgraph.graph.lesson_rows import turn_facts
from trajgraph.pipelines.adapters import normalize, split_records

SIG = "Requested setting <name>, but settings are not configured"
OTHER = "No module named <q>"
SCRIPT_V1 = "cat <<'EOF' > repro.py\nfrom app.models import User\nprint(User)\nEOF"
SCRIPT_V2 = (
    "cat <<'EOF' > repro.py\nfrom django.conf import settings\nsettings.configure()\n"
    "import django\ndjango.setup()\nfrom app.models import User\nprint(User)\nEOF"
)


def facts(*rows: tuple[str, tuple[str, ...]] | tuple[str, tuple[str, ...], tuple[str, ...]]):
    out = []
    for i, row in enumerate(rows):
        action, sigs = row[0], row[1]
        written = row[2] if len(row) > 2 else ()
        out.append(TurnFacts(i, action, sigs, written))
    return out


def test_resolved_by_the_edit_between_the_failure_and_the_rerun() -> None:
    (e,) = episodes(
        facts(
            (SCRIPT_V1, (), ("repro.py",)),
            ("python repro.py", (SIG,)),
            ("grep -n configure app/settings.py", ()),  # a read: not a step
            (SCRIPT_V2, (), ("repro.py",)),
            ("python repro.py", ()),
        )
    )
    assert (e.signature, e.failed_turns, e.resolved_turn, e.outcome) == (SIG, [1], 4, "resolved")
    assert [s.turn for s in e.steps] == [3] and e.attempts == []
    (key,) = e.steps[0].keys
    assert key.key == "edit the failing script"
    # the lines the rewrite changed, not the whole file
    assert "settings.configure" in key.tokens and "django.setup" in key.tokens
    assert "app.models" not in key.tokens


def test_attempts_the_same_failure_followed_did_not_help() -> None:
    (e,) = episodes(
        facts(
            ("python repro.py", (SIG,)),
            ("pip install django-environ", ()),
            ("python repro.py", (SIG,)),
            ("export DJANGO_SETTINGS_MODULE=app.settings && python repro.py", ()),
        )
    )
    assert e.failed_turns == [0, 2] and e.resolved_turn == 3
    assert [[s.turn for s in group] for group in e.attempts] == [[1]]
    assert e.attempts[0][0].keys == (Key("pip install django-environ"),)
    # the re-run that got past it carried a change: that change is the resolution
    assert [s.keys for s in e.steps] == [(Key("set DJANGO_SETTINGS_MODULE=app.settings"),)]


def test_never_retried_and_never_got_past() -> None:
    left, kept = episodes(
        facts(
            ("python repro.py", (SIG,)),
            ("pip install x", ()),
            ("python other.py", (OTHER,)),
            ("mkdir app", ()),
            ("python other.py", (OTHER,)),
        )
    )
    assert (left.outcome, left.retried, left.attempts) == ("unresolved", False, [])
    assert (kept.signature, kept.outcome, kept.retried) == (OTHER, "unresolved", True)
    assert [s.keys for group in kept.attempts for s in group] == [(Key("mkdir <new file>"),)]


def test_a_new_script_run_by_the_same_program_is_the_successor() -> None:
    (e,) = episodes(
        facts(
            ("python repro.py", (SIG,)),
            ("cat <<'EOF' > repro2.py\nimport django\ndjango.setup()\nEOF", (), ("repro2.py",)),
            ("python repro2.py", ()),
        )
    )
    assert e.resolved_turn == 2
    assert e.steps[0].keys[0].key == "edit a new file"
    # another program is no successor
    (f,) = episodes(facts(("python repro.py", (SIG,)), ("node x.js", ())))
    assert f.outcome == "unresolved"


def test_inline_code_changed_in_the_rerun_is_the_resolution() -> None:
    failing = 'python -c "\nfrom app.models import User\n"'
    fixed = 'python -c "\nimport django\nfrom django.conf import settings\nsettings.configure()\n"'
    (e,) = episodes(facts((failing, (SIG,)), (fixed, ())))
    assert e.resolved_turn == 1
    (step,) = e.steps
    assert step.keys[0].key == "edit the failing script"
    assert "settings.configure" in step.keys[0].tokens


def test_test_runs_and_reads_are_no_steps_and_commands_keep_their_words() -> None:
    (e,) = episodes(
        facts(
            ("python repro.py", (SIG,)),
            ("python tests/runtests.py app", ()),
            ("cat repro.py", ()),
            ("mkdir -p reproduce_app && touch reproduce_app/__init__.py", ()),
            ("python repro.py", ()),
        )
    )
    (step,) = e.steps
    assert step.keys == (Key("mkdir <new file>"), Key("touch <new file>"))


def test_command_segments_keep_quoted_newlines_and_drop_heredoc_bodies() -> None:
    action = (
        "mkdir -p app && \\\ncat <<'EOF' > app/x.py\nimport os\nEOF\npython -c \"\nprint(1)\n\""
    )
    segs = command_segments(action)
    assert segs[0] == ["mkdir", "-p", "app"]
    assert segs[1][0] == "cat"
    assert segs[2] == ["python", "-c", "\nprint(1)\n"]
    assert all("import os" not in " ".join(s) for s in segs)


def test_same_key() -> None:
    a = Key("edit the failing script", ("settings.configure", "django.setup"))
    b = Key("edit the failing script", ("django.conf", "settings.configure", "django.setup"))
    c = Key("edit the failing script", ("call_command", "connection.schema_editor", "os.path"))
    assert same_key(a, b) and not same_key(a, c)
    assert same_key(Key("pip install x"), Key("pip install x"))
    assert not same_key(Key("pip install x"), Key("pip install y"))
    assert not same_key(a, Key("edit the failing script"))  # tokens on one side only
    # by last component: call_command ~ django.core.management.call_command
    d = Key("edit the failing script", ("django.core.management.call_command",))
    assert same_key(d, Key("edit the failing script", ("call_command",)))
    assert share_key_action([Key("x"), a], [b]) and not share_key_action([a], [c])


def test_salient_tokens_leave_out_generic_names_and_comments() -> None:
    tokens = salient_tokens(["print(len(x))  # settings.configure", "os.path.join(a)", "setup()"])
    assert tokens == ("setup",)


def test_viewer_output_is_no_failure() -> None:
    assert is_failure_error("python repro.py", "ValueError: x", ["1"])
    assert not is_failure_error("grep -rn ValueError django/", "ValueError: x", ["0"])
    assert is_failure_error("ls missing/", "ls: cannot access 'missing/': No such file", ["2"])
    # a code comment that a viewer showed, with exit code 0
    assert not is_failure_error("cat x.py", "# the field does not exist", ["0"])


def test_turn_steps_read_each_turn_after_the_latest_failure() -> None:
    steps = turn_steps(
        facts(
            (SCRIPT_V1, (), ("repro.py",)),
            ("python repro.py", (SIG,)),
            (SCRIPT_V2, (), ("repro.py",)),
            ("ls", ()),
        )
    )
    assert sorted(steps) == [0, 1, 2]  # ls is a read
    assert steps[2].keys[0].key == "edit the failing script"


def test_real_improperly_configured_runs_got_past_it_by_editing_their_script(
    django_corpus: Path,
) -> None:
    """The corpus README's seven runs: each got past "settings are not configured" within two
    turns, by rewriting the code it ran (a script, or python -c code)."""
    runs = ("11149", "11211", "11880", "12713", "13028", "13568", "14534")
    extractor = HeuristicExtractor()
    for run in runs:
        path = django_corpus / f"django__django-{run}.traj.json"
        (traj,) = (t for r in split_records(str(path), path.read_bytes()) for t in normalize(r))
        batch = extractor.extract_windows(build_windows(traj, budget_tokens=2048), task="")
        merged = merge(traj["turns"], batch.extractions)
        found, _ = turn_facts(traj["turns"], list(merged.states))
        mine = [e for e in episodes(found) if e.signature.startswith("Requested setting <name>")]
        assert len(mine) == 1, run
        (e,) = mine
        assert e.resolved_turn is not None and e.resolved_turn - e.failed_turns[0] <= 2, run
        keys = [k for s in e.steps for k in s.keys]
        assert any(k.key == "edit the failing script" for k in keys), (run, keys)
        assert any(
            {"settings.configure", "django.setup", "django.db"} & set(k.tokens)
            or any("models" in t for t in k.tokens)
            for k in keys
        ), (run, keys)
