"""Identifier finder, heuristic extractor and the verbatim contract (synthetic + real logs)."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from trajgraph.core.errors import ConfigError
from trajgraph.extractors import get_extractor
from trajgraph.extractors.base import Extractor, verbatim_violations
from trajgraph.extractors.heuristic import MAX_OBJECTS, MAX_STATES, HeuristicExtractor, occurs
from trajgraph.extractors.identifiers import command_line, find_identifiers
from trajgraph.extractors.merge import merge
from trajgraph.extractors.windows import Window, build_windows
from trajgraph.schemas.extraction import ObjectItem, StateItem, WindowExtraction

EX = HeuristicExtractor()


def window(action: str, obs: str, prev: str | None = None, turn: int = 5) -> Window:
    return Window(
        tenant="default",
        trajectory_id="t",
        turn=turn,
        prev_turn=None if prev is None else turn - 1,
        prev_observation=prev or "",
        action=action,
        observation=obs,
        truncated=False,
        tokens=0,
    )


def states_of(ext: WindowExtraction) -> list[tuple[str, str, str, str]]:
    return [(s.kind, s.subject, s.attribute, s.value) for s in ext.states]


# --- realistic snippets (modelled on the shared logs) -----------------------------------------

PYTEST_FAIL = """============================= test session starts ==============================
collected 4 items

tests/test_api.py ...F                                                    [100%]

=================================== FAILURES ===================================
_________________________________ test_create __________________________________

    def test_create():
        resp = client.post("/items", json={"name": "x"})
>       assert resp.status_code == 201
E       AssertionError: assert 500 == 201

tests/test_api.py:14: AssertionError
=========================== short test summary info ============================
FAILED tests/test_api.py::test_create - AssertionError: assert 500 == 201
========================= 1 failed, 3 passed in 0.42s ==========================
[The command completed with exit code 1.]"""

TRACEBACK = """<returncode>1</returncode>
<output>
Traceback (most recent call last):
  File "/testbed/reproduce.py", line 3, in <module>
    import requests
ModuleNotFoundError: No module named 'requests'
</output>"""

GIT_DIFF = """diff --git a/src/app/config.py b/src/app/config.py
index 27756d9..b40ad80 100644
--- a/src/app/config.py
+++ b/src/app/config.py
@@ -10,7 +10,7 @@ class Config:
     def load(self):
-        timeout = 30
+        timeout = 60
         retries = 3
"""

CODE_LISTING = """<returncode>0</returncode>
<output>
   168\t        if callable(self.lastmod):
   169\t            try:
   170\t                return max([self.lastmod(item) for item in self.items()])
   171\t            except TypeError:
   172\t                raise ValueError("bad")
</output>"""

SQL_ERROR = """EXECUTION RESULT of [execute_snowflake_sql]:
SQL Error: 000904 (42000): 01bced60: SQL compilation error: error line 7 at position 51
invalid identifier 'P."evaluation_sequence_number"'"""

SNIPPETS = [
    PYTEST_FAIL,
    TRACEBACK,
    GIT_DIFF,
    CODE_LISTING,
    SQL_ERROR,
    "fatal: not a git repository (or any of the parent directories): .git",
    "bash: pytst: command not found",
    "ls: cannot access 'missing/dir': No such file or directory",
    '{"status": "shipped", "order_id": "W2378156", "total": 105.5, "gift": false}',
    "{'reservation_id': 'M05KNL', 'cabin': 'economy'}",
    "DEBUG=true\nPORT=8080\nDATABASE_URL=postgres://db:5432/app",
    "Ran 60 tests in 0.733s\n\nOK",
    "HTTP/1.1 404 Not Found\nContent-Type: text/html",
    "Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ...",
    "__init__.py\napps.py\nviews.py\nsitemap.xml",
    "<div id=\"app\"><ul class='todo-list'></ul></div>\n#app { margin: 0 }",
    "SELECT id, name FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100",
    "日本語の出力 🙂 ação: ok\nvalue: ñ",
    "",
]
ACTIONS = [
    "cd /repo && python -m pytest tests/test_api.py -q",
    "python3 reproduce.py",
    "git diff",
    "nl -ba django/contrib/sitemaps/__init__.py | sed -n '165,175p'",
    'execute_snowflake_sql({"sql": "SELECT a, b FROM DB.SCH.T1 WHERE x = 1"})',
    "sed -i 's/timeout = 30/timeout = 60/' src/app/config.py",
    "cat <<'EOF' > reproduce.py\nimport requests\nprint(requests.get('http://x'))\nEOF",
    'get_user_details({"user_id": "mia_li_3668"})',
    "create /workspace/todo-app/index.html\n<!DOCTYPE html>",
    "ls -la",
    "Thank you, Mia. Could you tell me your reservation id?",
    "",
]


# --- identifiers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "action", "expected"),
    [
        (
            "cd /repo && pytest tests/test_models.py -x -q",
            True,
            [("/repo", "path"), ("pytest", "command"), ("tests/test_models.py", "path")],
        ),
        (
            "python reproduce.py --verbose",
            True,
            [("python reproduce.py", "command"), ("reproduce.py", "path")],
        ),
        (
            "git diff HEAD~1 -- src/app/main.ts",
            True,
            [("git diff", "command"), ("src/app/main.ts", "path")],
        ),
        (
            "curl -s https://api.example.com/v1/items?id=3 -o out.json",
            True,
            [
                ("curl", "command"),
                ("https://api.example.com/v1/items?id=3", "url"),
                ("out.json", "path"),
            ],
        ),
        (
            'execute_bash({"command": "ls USFS_FIA", "work_dir": "/data/USFS_FIA"})',
            True,
            [
                ("command", "key"),
                ("ls", "command"),
                ("ls USFS_FIA", "quoted"),
                ("work_dir", "key"),
                ("/data/USFS_FIA", "path"),
            ],
        ),
        (
            TRACEBACK,
            False,
            [
                ("/testbed/reproduce.py", "path"),
                ("ModuleNotFoundError", "error"),
                ("requests", "quoted"),
            ],
        ),
        (
            "django.core.exceptions.ValidationError: ['Enter a valid date.']",
            False,
            [("django.core.exceptions.ValidationError", "error")],
        ),
        (
            'Exception in thread "main" java.lang.NullPointerException\n'
            "\tat com.example.App.main(App.java:14)",
            False,
            [("main", "quoted"), ("java.lang.NullPointerException", "error"), ("App.java", "path")],
        ),
        (
            "SELECT id, name FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100",
            False,
            [
                (
                    "SELECT id, name FROM users u JOIN orders o ON o.user_id = u.id "
                    "WHERE o.total > 100",
                    "sql",
                ),
                ("id", "column"),
                ("name", "column"),
                ("users", "table"),
                ("orders", "table"),
            ],
        ),
        (
            "document.querySelector('#submit-btn').click(); $('.todo-item')"
            ' [data-testid="row-3"]',
            False,
            [
                ("#submit-btn", "element"),
                (".todo-item", "element"),
                ('[data-testid="row-3"]', "element"),
                ("row-3", "quoted"),
            ],
        ),
        (
            "Server listening on port 8080\nHTTP/1.1 404 Not Found\nand 3 apples, line 42",
            False,
            [("port 8080", "number"), ("HTTP/1.1 404", "number")],
        ),
        (
            "FAILED tests/test_api.py::test_create - AssertionError: assert 500 == 201",
            False,
            [
                ("tests/test_api.py", "path"),
                ("tests/test_api.py::test_create", "symbol"),
                ("AssertionError", "error"),
            ],
        ),
        (GIT_DIFF, False, [("src/app/config.py", "path")]),
        (
            "$ npm run build\nError: Cannot find module 'webpack'",
            False,
            [("npm run", "command"), ("webpack", "quoted")],
        ),
        # Prose, apostrophes, fractions, sed expressions and imports are not identifiers.
        ("I'll fix the parser and/or the lexer, then it's done in 1/2 the time.", False, []),
        ("from django.conf import settings", False, []),
        ("Thank you, Mia. Could you please provide your user ID?", True, []),
        (
            "echo COMPLETE && git add -A && git diff --cached",
            True,
            [("git add", "command"), ("git diff", "command")],
        ),
    ],
)
def test_find_identifiers_exact(text: str, action: bool, expected: list[tuple[str, str]]) -> None:
    assert find_identifiers(text, action=action) == expected


def test_identifiers_are_verbatim_and_sane() -> None:
    rng = random.Random(11)
    corpus = SNIPPETS + ACTIONS
    texts = corpus + ["\n".join(rng.sample(corpus, 4)) for _ in range(100)]
    for text in texts:
        for action in (False, True):
            found = find_identifiers(text, action=action)
            names = [n for n, _ in found]
            assert len(names) == len(set(names))  # deduped
            for name, _ in found:
                assert name in text
                assert 2 <= len(name) <= 200
                assert any(c.isalnum() for c in name)


def test_command_line_is_a_short_verbatim_prefix() -> None:
    assert command_line("python3 reproduce_issue.py\n") == "python3 reproduce_issue.py"
    assert command_line("cat <<'EOF' > x.py\nbody\nEOF") == "cat <<'EOF' > x.py"
    assert command_line('execute_bash({"command": "ls USFS_FIA"})') == "ls USFS_FIA"
    long = "grep -rn " + "pattern_" * 30 + " src/"
    cut = command_line(long)
    assert long.startswith(cut) and len(cut) <= 80 and not cut.endswith(" ")
    assert command_line("") == ""


def test_occurs_respects_word_boundaries() -> None:
    assert occurs("app", "cd app && ls")
    assert not occurs("app", "application")
    assert occurs("#app", "x#app y")
    assert occurs("/tmp/a.py", "cat /tmp/a.py")
    assert not occurs("a.py", "data.pyc")


# --- heuristic states --------------------------------------------------------------------------


def test_pytest_failure_window() -> None:
    action = "cd /repo && python -m pytest tests/test_api.py -q"
    ext = EX.extract(window(action, PYTEST_FAIL, prev="collected 0 items"))
    states = states_of(ext)
    assert states[0] == ("exit_code", action, "exit_code", "1")
    assert (
        "error",
        "tests/test_api.py::test_create",
        "error",
        "FAILED tests/test_api.py::test_create - AssertionError: assert 500 == 201",
    ) in states
    assert ("error", "AssertionError", "error", "E       AssertionError: assert 500 == 201") in (
        states
    ) or ("error", "AssertionError", "error", "AssertionError: assert 500 == 201") in states
    assert ("status", action, "tests", "1 failed, 3 passed in 0.42s") in states
    assert [s.key for s in ext.states] == [f"t5.s{i}" for i in range(len(ext.states))]
    assert {(c.src, c.dst) for c in ext.causes} == {
        ("turn:5", f"state:{s.key}") for s in ext.states
    }
    assert all(c.turns == [5] for c in ext.causes)
    names = {o.name: o.kind for o in ext.objects}
    assert names["tests/test_api.py"] == "path"
    assert names["AssertionError"] == "error"
    assert names["python -m pytest"] == "command"
    exit_state = ext.states[0].key
    linked = {a.b for a in ext.associations if a.a == f"state:{exit_state}"}
    assert "object:tests/test_api.py" in linked and "object:python -m pytest" in linked
    assert ext.extractor == "heuristic"
    assert verbatim_violations(ext, window(action, PYTEST_FAIL, prev="collected 0 items")) == []


def test_traceback_in_mini_swe_agent_output() -> None:
    ext = EX.extract(window("python3 reproduce.py", TRACEBACK))
    assert states_of(ext) == [
        ("exit_code", "python3 reproduce.py", "exit_code", "1"),
        (
            "error",
            "ModuleNotFoundError",
            "error",
            "ModuleNotFoundError: No module named 'requests'",
        ),
        # A short output's last line is the run's result (SUPERSEDES links it to the next run).
        (
            "status",
            "python3 reproduce.py",
            "output",
            "ModuleNotFoundError: No module named 'requests'",
        ),
    ]


@pytest.mark.parametrize(
    ("obs", "code"),
    [
        ("<returncode>2</returncode>\n<output>\n</output>", "2"),
        ("Command `make` executed with exit code -1.", "-1"),
        ("Exit code: 0", "0"),
        ('{"exit_code": 127, "stdout": ""}', "127"),
        ("Process exited with code 3", "3"),
    ],
)
def test_exit_code_forms(obs: str, code: str) -> None:
    ext = EX.extract(window("make build", obs))
    assert ("exit_code", "make build", "exit_code", code) in states_of(ext)


def test_git_diff_lines() -> None:
    ext = EX.extract(window("git diff", GIT_DIFF))
    assert states_of(ext) == [
        ("line_added", "src/app/config.py", "line", "timeout = 60"),
        ("line_removed", "src/app/config.py", "line", "timeout = 30"),
    ]


def test_sed_in_place_edit_records_the_replacement() -> None:
    action = "sed -i '171s/except TypeError:/except (TypeError, ValueError):/' pkg/__init__.py"
    ext = EX.extract(window(action, "<returncode>0</returncode>\n<output>\n</output>"))
    assert (
        "file_changed",
        "pkg/__init__.py",
        "content",
        "except (TypeError, ValueError):",
    ) in states_of(ext)


def test_file_creation_and_failed_edit() -> None:
    heredoc = "cat <<'EOF' > reproduce.py\nimport requests\nEOF"
    ok = EX.extract(window(heredoc, "<returncode>0</returncode>\n<output>\n</output>"))
    assert ("file_changed", "reproduce.py", "content", "reproduce.py") in states_of(ok)
    failed = EX.extract(window(heredoc, "<returncode>1</returncode>\n<output>\nbash: x\n</output>"))
    assert all(s.kind != "file_changed" for s in failed.states)
    created = EX.extract(
        window(
            "create /workspace/app.js\nconst x = 1",
            "File created successfully at: /workspace/app.js",
        )
    )
    assert ("file_changed", "/workspace/app.js", "content", "/workspace/app.js") in states_of(
        created
    )
    swe_edit = EX.extract(
        window(
            "edit 2:2\n    return 2\nend_of_edit",
            "[File: /repo/m.py (3 lines total)]\n1:def f():\n2:    return 2\n",
        )
    )
    assert ("file_changed", "/repo/m.py", "content", "/repo/m.py") in states_of(swe_edit)
    replaced = EX.extract(
        window(
            "str_replace /w/a.py\n<old_str>\nx = 1\n</old_str>\n<new_str>\nx = 2\n</new_str>", "ok"
        )
    )
    assert ("file_changed", "/w/a.py", "content", "x = 2") in states_of(replaced)
    tool_call = EX.extract(
        window('str_replace_editor({"command": "create", "path": "/w/b.py"})', "File created")
    )
    assert ("file_changed", "/w/b.py", "content", "/w/b.py") in states_of(tool_call)


def test_json_fields_new_or_changed_only() -> None:
    prev = '{"status": "pending", "order_id": "W1", "total": 105.5}'
    obs = '{"status": "shipped", "order_id": "W1", "total": 105.5, "eta": "2024-05-20"}'
    ext = EX.extract(window('get_order_details({"order_id": "W1"})', obs, prev=prev))
    assert states_of(ext) == [
        ("value", "status", "value", "shipped"),
        ("value", "eta", "value", "2024-05-20"),
    ]


def test_key_value_lines() -> None:
    ext = EX.extract(window("echo", "DEBUG=true\nPORT=8080\n", prev="DEBUG=false\nPORT=8080\n"))
    assert ("value", "DEBUG", "value", "true") in states_of(ext)
    assert all(s.subject != "PORT" for s in ext.states)


def test_settings_files_keep_one_history_per_file_and_key() -> None:
    shown = EX.extract(
        window("cat .env", "DEBUG=true\nPORT=8080\n", prev="DEBUG=false\nPORT=8080\n")
    )
    assert states_of(shown) == [("value", ".env", "DEBUG", "true")]  # PORT did not change
    sed = EX.extract(window("sed -i 's/^retries=.*/retries=7/' config.ini", ""))
    assert ("value", "config.ini", "retries", "7") in states_of(sed)
    assert ("file_changed", "config.ini", "content", "retries=7") in states_of(sed)
    other = EX.extract(window("sed -i 's/^retries=.*/retries=3/' deploy/staging.ini", ""))
    assert ("value", "deploy/staging.ini", "retries", "3") in states_of(other)
    echo = EX.extract(window("echo 'timeout=30' >> config.ini", ""))
    assert ("value", "config.ini", "timeout", "30") in states_of(echo)
    source = EX.extract(window("sed -i 's/^x=.*/x=2/' app.py", ""))
    assert all(s.kind != "value" for s in source.states)  # x = 2 in code is not a setting


def test_list_lines_added_and_removed() -> None:
    ext = EX.extract(window("ls", "a.py\nb.py\nd.py\n", prev="a.py\nb.py\nc.py\n"))
    assert ("line_added", "ls", "line", "d.py") in states_of(ext)
    assert ("line_removed", "ls", "line", "c.py") in states_of(ext)
    unrelated = EX.extract(window("ls", "x\ny\nz\n", prev="a.py\nb.py\nc.py\n"))
    assert all(s.kind not in ("line_added", "line_removed") for s in unrelated.states)


def test_code_listings_are_not_errors() -> None:
    ext = EX.extract(window("nl -ba pkg/__init__.py | sed -n '168,172p'", CODE_LISTING))
    assert states_of(ext) == [
        ("exit_code", "nl -ba pkg/__init__.py | sed -n '168,172p'", "exit_code", "0")
    ]


@pytest.mark.parametrize(
    ("obs", "subject", "value"),
    [
        (
            SQL_ERROR,
            "run_sql",
            "SQL Error: 000904 (42000): 01bced60: SQL compilation error: "
            "error line 7 at position 51",
        ),
        (
            "fatal: not a git repository (or any of the parent directories): .git",
            "run_sql",
            "fatal: not a git repository (or any of the parent directories): .git",
        ),
        ("bash: pytst: command not found", "run_sql", "bash: pytst: command not found"),
        (
            "Error: payment amount does not add up",
            "run_sql",
            "Error: payment amount does not add up",
        ),
    ],
)
def test_error_lines(obs: str, subject: str, value: str) -> None:
    ext = EX.extract(window("run_sql", obs))
    assert ("error", subject, "error", value) in states_of(ext)


def test_short_output_and_status_states() -> None:
    ext = EX.extract(
        window(
            "python3 reproduce.py",
            "<returncode>0</returncode>\n<output>\nSuccess! Lastmod: None\n</output>",
        )
    )
    assert ("status", "python3 reproduce.py", "output", "Success! Lastmod: None") in states_of(ext)
    ran = EX.extract(window("python3 tests/runtests.py x", "Ran 60 tests in 0.733s\n\nOK\n"))
    assert ("status", "python3 tests/runtests.py x", "tests", "OK") in states_of(ran)
    http = EX.extract(window("curl -i http://x", "HTTP/1.1 404 Not Found\nServer: nginx"))
    assert ("status", "curl -i http://x", "http_status", "404") in states_of(http)
    chat = EX.extract(window("Could you give me your user id please?", "Sure, it is mia_li_3668."))
    assert chat.states == []


def test_caps_on_huge_windows() -> None:
    obs = "\n".join(
        f"FAILED tests/test_{i}.py::test_{i} - ValueError: bad {i}\n/path/to/file_{i}.py\nK{i}=v{i}"
        for i in range(100)
    )
    ext = EX.extract(window("pytest", obs, prev="K0=x"))
    assert len(ext.states) <= MAX_STATES
    assert len(ext.objects) <= MAX_OBJECTS
    assert sum(1 for s in ext.states if s.kind == "error") <= 4
    kinds = [o.kind for o in ext.objects]
    assert kinds.count("path") >= 20  # paths are preferred when capping
    assert verbatim_violations(ext, window("pytest", obs, prev="K0=x")) == []


def test_extraction_is_deterministic() -> None:
    w = window(ACTIONS[0], PYTEST_FAIL, prev=GIT_DIFF)
    assert EX.extract(w) == EX.extract(w)
    assert EX.extract(w).model_dump_json() == HeuristicExtractor().extract(w).model_dump_json()


def test_verbatim_property_over_synthetic_windows() -> None:
    rng = random.Random(5)
    for _ in range(300):
        w = window(
            rng.choice(ACTIONS),
            "\n".join(rng.sample(SNIPPETS, rng.randint(0, 3))),
            prev=rng.choice([None, *SNIPPETS]),
            turn=rng.randint(1, 50),
        )
        ext = EX.extract(w)
        text = w.text()
        assert verbatim_violations(ext, w) == []
        for s in ext.states:
            assert s.value in text  # exact, not only after whitespace normalization
            assert s.subject in text or s.subject == "action"
            assert s.turn == w.turn
        for o in ext.objects:
            assert o.name in w.action or o.name in w.observation  # current turn only
            assert o.turns == [w.turn]
        state_refs = {f"state:{s.key}" for s in ext.states}
        object_refs = {f"object:{o.name}" for o in ext.objects}
        for a in ext.associations:
            assert a.a in state_refs and a.b in object_refs


# --- verbatim check and registry ----------------------------------------------------------------


def test_verbatim_violations_flags_paraphrase_and_accepts_rewrapping() -> None:
    w = window("pytest -q", "E   AssertionError:   assert\n   500 == 201")
    good = WindowExtraction(
        turn=5,
        states=[
            StateItem(
                key="s1",
                subject="pytest -q",
                attribute="error",
                value="AssertionError: assert 500 == 201",  # re-wrapped whitespace is fine
                kind="error",
                turn=5,
                text="x",
            )
        ],
        objects=[ObjectItem(name="AssertionError", kind="error", turns=[5])],
    )
    assert verbatim_violations(good, w) == []
    bad = good.model_copy(
        update={
            "states": [good.states[0].model_copy(update={"value": "assertion failed: 500 != 201"})],
            "objects": [
                ObjectItem(name="AssertError", kind="error", turns=[5]),
                ObjectItem(name="  ", kind="other", turns=[5]),
            ],
        }
    )
    problems = verbatim_violations(bad, w)
    assert len(problems) == 3
    assert "assertion failed" in problems[2] or "assertion failed" in " ".join(problems)


def test_get_extractor() -> None:
    ex = get_extractor("heuristic")
    assert isinstance(ex, HeuristicExtractor) and isinstance(ex, Extractor)
    assert ex.name == "heuristic"
    with pytest.raises(ConfigError, match="unknown extractor"):
        get_extractor("gpt-17")


# --- real logs -----------------------------------------------------------------------------------


def _real_trajectories(shared: Path) -> list[dict[str, Any]]:
    """Minimal readers for the two simplest formats (the real adapters live elsewhere)."""
    out: list[dict[str, Any]] = []
    for path in sorted(shared.glob("swe-agent/*.traj")):
        steps = json.loads(path.read_text("utf-8"))["trajectory"]
        out.append(
            {
                "id": path.stem,
                "turns": [
                    {
                        "idx": i,
                        "action": s.get("action") or "",
                        "observation": s.get("observation") or "",
                    }
                    for i, s in enumerate(steps)
                ],
            }
        )
    for path in sorted(shared.glob("mini-swe-agent/*.traj.json")):
        msgs = json.loads(path.read_text("utf-8"))["messages"]
        turns: list[dict[str, Any]] = []
        for i, m in enumerate(msgs):
            if m.get("role") != "assistant" or not isinstance(m.get("content"), str):
                continue
            block = re.search(r"```bash\n(.*?)\n```", m["content"], re.S)
            nxt = msgs[i + 1] if i + 1 < len(msgs) else {}
            obs = nxt.get("content") if nxt.get("role") == "user" else ""
            turns.append(
                {
                    "idx": len(turns),
                    "action": block.group(1) if block else m["content"],
                    "observation": obs if isinstance(obs, str) else "",
                }
            )
        out.append({"id": path.name, "turns": turns})
    return out


@pytest.mark.parametrize("budget", [128, 512, 2048])
def test_real_logs_windows_extraction_and_merge(shared_dir: Path, budget: int) -> None:
    trajs = _real_trajectories(shared_dir)
    assert trajs and all(t["turns"] for t in trajs)
    for traj in trajs:
        windows = build_windows(traj, budget_tokens=budget)
        assert len(windows) == len(traj["turns"])
        extractions = []
        for w in windows:
            assert w.tokens <= budget
            ext = EX.extract(w)
            assert verbatim_violations(ext, w) == []
            extractions.append(ext)
        merged = merge(traj["turns"], extractions)
        shuffled = extractions[:]
        random.Random(budget).shuffle(shuffled)
        assert merge(traj["turns"], shuffled) == merged
        assert len({s.key for s in merged.states}) == len(merged.states)


def test_real_logs_expected_facts(shared_dir: Path) -> None:
    by_id = {t["id"]: t for t in _real_trajectories(shared_dir)}
    swe = by_id.get("pydicom__pydicom-1458")
    if swe is None:
        pytest.skip("pydicom trajectory not present")
    exts = [EX.extract(w) for w in build_windows(swe, budget_tokens=2048)]
    errors = [s for e in exts for s in e.states if s.kind == "error"]
    assert any(s.subject == "AttributeError" and s.turn == 2 for s in errors)
    assert any(s.subject == "SyntaxError" for s in errors)
    objects = {o.name for e in exts for o in e.objects}
    assert {"reproduce_bug.py", "python reproduce_bug.py", "AttributeError"} <= objects
    merged = merge(swe["turns"], exts)
    # The AttributeError of turn 2 leads to the next action (find_file), a reaction to it.
    err = next(s for s in merged.states if s.subject == "AttributeError")
    assert any(c.src == f"state:{err.key}" and c.dst == "turn:3" for c in merged.causes)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT " * 6000,
        "select\\n" * 5000,
        "a." * 20000,
        "/a" * 20000,
        '"a' * 20000,
        "#a" * 20000,
        "FAILED x::y - ValueError: z\n" * 1500,
        "k=v\n" * 10000,
        "[data-x=" * 5000,
    ],
)
def test_pathological_inputs_stay_fast(text: str) -> None:
    start = time.perf_counter()
    find_identifiers(text, action=True)
    EX.extract(window(text[:3000], text, prev=text))
    assert time.perf_counter() - start < 2.0  # ~50 ms each: no quadratic regex blow-up


def test_extraction_speed(shared_dir: Path) -> None:
    windows = [
        w for t in _real_trajectories(shared_dir) for w in build_windows(t, budget_tokens=2048)
    ]
    EX.extract(windows[0])
    start = time.perf_counter()
    for w in windows * 5:
        EX.extract(w)
    per_window = (time.perf_counter() - start) / (len(windows) * 5)
    assert per_window < 0.025  # typically ~1 ms; generous for slow CI machines


def test_spider_agents_failed_command_is_an_error() -> None:
    obs = "EXECUTION RESULT of [execute_bash]:\nCommand execution failed"
    ext = EX.extract(window("grep -A 5 'ORDER BY' query.sql", obs))
    assert ("error", "grep -A 5 'ORDER BY' query.sql", "error", "Command execution failed") in (
        states_of(ext)
    )


def test_a_code_listing_holds_no_exit_code():
    from trajgraph.extractors.heuristic import _exit_code

    listing = "  3398→        return status\n  3399→            types: Filter for notices"
    assert _exit_code(listing) is None  # was 3399: a line number across the line break
    assert _exit_code("Exit code 127\n/bin/bash: x: No such file or directory") == "127"


def test_states_from_the_structure_of_observations() -> None:
    # "key: value" lines with keys of a few words, each a value with its own history.
    board = "Board:\n0| C R P G\n1| R C G C\nScore: 6\nMoves Left: {}\nLast Action: ((0,0), (0,0))"
    ext = EX.extract(window("((0,0), (0,0))", board.format(47), prev=board.format(48)))
    assert states_of(ext) == [("value", "Moves Left", "value", "47")]
    # A field whose value is a list.
    obs = "{'board': [[0, 2], [4, 0]], 'highest_tile': 4}"
    ext = EX.extract(window("down", obs, prev="{'board': [[2, 2], [0, 0]], 'highest_tile': 2}"))
    assert ("value", "board", "value", "[[0, 2], [4, 0]]") in states_of(ext)
    assert ("value", "highest_tile", "value", "4") in states_of(ext)
    # Items of a list that place a named thing: the name is the subject.
    seen = "You see:\n- grass 1 step to your west\n- tree {} steps to your south-east\n"
    ext = EX.extract(window("Move South", seen.format(6), prev=seen.format(7)))
    assert states_of(ext) == [("value", "tree", "value", "6 steps to your south-east")]
    lone = EX.extract(window("say", "I walked 3 miles today.", prev="I walked 2 miles today."))
    assert all(s.subject != "I walked" for s in lone.states)  # one line is prose, not a list


def test_list_members_belong_to_their_element_or_heading() -> None:
    tree = "[1] RootWebArea 'Shop'\n\t[1483] link 'Gingerbread Kit'\n\t[2295] generic '20%'\n"
    ext = EX.extract(
        window("scroll [down]", tree + "\t[2301] link 'Page 2'\n", prev=tree + "\t[2300] img\n")
    )
    assert ("line_added", "[2301]", "line", "[2301] link 'Page 2'") in states_of(ext)
    assert ("line_removed", "[2300]", "line", "[2300] img") in states_of(ext)
    rules = "Active rules:\nbaba is you\nwall is stop\nflag is win\n"
    ext = EX.extract(window("push", rules.replace("flag is win", "rock is win"), prev=rules))
    assert ("line_added", "Active rules", "line", "rock is win") in states_of(ext)


def test_the_output_line_that_says_what_happened() -> None:
    obs = (
        "You arrive at desk 1. On the desk 1, you see a laptop 1.\n\n"
        "The current available actions are: examine desk 1, go to bed 1, go to drawer 1, "
        "go to drawer 2, help, inventory, look"
    )
    ext = EX.extract(window("go to desk 1", obs))
    assert ("status", "go to desk 1", "output", obs.split("\n")[0]) in states_of(ext)
