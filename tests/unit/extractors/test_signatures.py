"""Failure signatures: the same failure in different runs and files matches, different
failures do not. Hand-written lines modelled on the shared logs, then the real lines of the
Django corpus and the agent sessions (read from ../shared/corpora, never copied)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from trajgraph.extractors.heuristic import HeuristicExtractor, error_lines
from trajgraph.extractors.signatures import (
    MAX_CHARS,
    closest_signature,
    quoted_values,
    signature,
    typed_values,
    wrapper,
)
from trajgraph.extractors.windows import Window
from trajgraph.graph.lesson_rows import full_error_line

SAME = [
    (  # a template's setting name, the module path of the class, a script's own prefix
        "django.core.exceptions.ImproperlyConfigured: Requested setting INSTALLED_APPS, but "
        "settings are not configured. You must either define the environment variable "
        "DJANGO_SETTINGS_MODULE or call settings.configure() before accessing settings.",
        "An error occurred: Requested setting USE_I18N, but settings are not configured. You "
        "must either define the environment variable DJANGO_SETTINGS_MODULE or call "
        "settings.configure() before accessing settings.",
    ),
    (  # an unquoted table name
        "sqlite3.OperationalError: no such table: __main___book",
        "django.db.utils.OperationalError: no such table: reproduce_app_report",
    ),
    (
        "ModuleNotFoundError: No module named 'reproduce_app'",
        "ModuleNotFoundError: No module named 'psycopg2'",
    ),
    (  # reprs of objects
        "ImproperlyConfigured: The app module <module 'reproduce_app'> has no filesystem location",
        "ImproperlyConfigured: The app module <class '__main__.module'> has no filesystem location",
    ),
    (  # addresses
        "AssertionError: <m.Toy object at 0x7aa8691de358> is not an instance of <class 'dict'>",
        "AssertionError: <m.Toy object at 0x75837557ef98> is not an instance of <class 'dict'>",
    ),
    (  # numbers and ranges
        "UnicodeEncodeError: 'ascii' codec can't encode characters in position 39-47: ordinal "
        "not in range(128)",
        "UnicodeEncodeError: 'ascii' codec can't encode characters in position 0-4: ordinal "
        "not in range(128)",
    ),
    (  # a printed exception and the raised one
        "Caught exception: TypeError: __new__() missing 1 required positional argument: 'max'",
        "TypeError: __new__() missing 1 required positional argument: 'y'",
    ),
    (  # paths
        "rm: cannot remove 'reproduce_issue.py': No such file or directory",
        "rm: cannot remove 'fix.py': No such file or directory",
    ),
    (
        "/bin/bash: line 1: /tmp/venv/bin/python: No such file or directory",
        "bash: line 3: app/models.py: No such file or directory",
    ),
    (  # pytest's E lines
        "E       AssertionError: expected port=8080, got port=8077",
        "AssertionError: expected port=9000, got port=9001",
    ),
    (  # a script's own context before the error it caught (issue 34's held-out line)
        "floatformat('0.00', 0) with error: Requested setting USE_THOUSAND_SEPARATOR, but "
        "settings are not configured. You must either define the environment variable "
        "DJANGO_SETTINGS_MODULE or call settings.configure() before accessing settings.",
        "django.core.exceptions.ImproperlyConfigured: Requested setting INSTALLED_APPS, but "
        "settings are not configured. You must either define the environment variable "
        "DJANGO_SETTINGS_MODULE or call settings.configure() before accessing settings.",
    ),
    (  # the context, then the class and message
        "case 3 (value=1.5) raised exception: ModuleNotFoundError: No module named 'psycopg2'",
        "ModuleNotFoundError: No module named 'reproduce_app'",
    ),
]

DIFFERENT = [
    (  # one class, two failures
        "django.core.exceptions.ImproperlyConfigured: Requested setting INSTALLED_APPS, but "
        "settings are not configured.",
        "django.core.exceptions.ImproperlyConfigured: The app module <module 'x'> has no "
        "filesystem location, you must configure this app with an AppConfig subclass",
    ),
    (
        "django.core.exceptions.AppRegistryNotReady: Apps aren't loaded yet.",
        "django.core.exceptions.AppRegistryNotReady: The translation infrastructure cannot be "
        "initialized before the apps registry is ready.",
    ),
    (
        "sqlite3.OperationalError: no such table: x",
        "sqlite3.OperationalError: user-defined function raised exception",
    ),
    ("IndentationError: expected an indented block", "IndentationError: unexpected indent"),
    ("SyntaxError: invalid syntax", "SyntaxError: EOL while scanning string literal"),
    ("ModuleNotFoundError: No module named 'x'", "ImportError: cannot import name 'SelfModel'"),
    ("RuntimeError: Settings already configured.", "RuntimeError: Model class x doesn't declare"),
    (
        "django.db.utils.IntegrityError: UNIQUE constraint failed: a.b",
        "django.db.utils.IntegrityError: NOT NULL constraint failed: a.b",
    ),
    (
        "UnicodeEncodeError: 'ascii' codec can't encode characters in position 1-2: ordinal "
        "not in range(128)",
        "UnicodeDecodeError: 'ascii' codec can't decode byte 0xe2 in position 3611: ordinal "
        "not in range(128)",
    ),
    ("KeyError: 'to'", "IndexError: list index out of range"),
    ("KeyError: 'to'", "AssertionError: 0 != 1"),
    (  # errno names the failure
        "FileNotFoundError: [Errno 2] No such file or directory: 'psql'",
        "PermissionError: [Errno 13] Permission denied: 'psql'",
    ),
    (  # the missing command is the failure
        "bash: psql: command not found",
        "bash: pytest: command not found",
    ),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_same_failure_same_signature(a: str, b: str) -> None:
    assert signature(a) is not None
    assert signature(a) == signature(b)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_failures_different_signatures(a: str, b: str) -> None:
    assert signature(a) is not None and signature(b) is not None
    assert signature(a) != signature(b)


def test_signature_text_keeps_the_words_and_drops_the_values() -> None:
    sig = signature("sqlite3.OperationalError: no such table: reproduce_app_book")
    assert sig == "no such table: <name>"
    assert signature("KeyError: 'to'") == "KeyError: <q>"  # too little left: the class stays
    assert signature("AssertionError") == "AssertionError"
    assert signature("") is None and signature("   ") is None
    assert signature("'x'") is None  # nothing specific left, and no class
    assert signature("[Errno 2] No such file: 'a'") == "[Errno 2] No such file: <q>"


def test_truncated_and_full_line_share_the_signature() -> None:
    full = (
        "django.core.exceptions.ImproperlyConfigured: Requested setting INSTALLED_APPS, but "
        "settings are not configured. You must either define the environment variable "
        "DJANGO_SETTINGS_MODULE or call settings.configure() before accessing settings."
    )
    for cut in (200, 180, 170):
        assert signature(full[:cut]) == signature(full), cut
    assert len(signature(full) or "") <= MAX_CHARS


def test_the_wrapper_is_kept_as_context_and_out_of_the_signature() -> None:
    line = SAME[-2][0]
    assert wrapper(line) == "floatformat('0.00', 0)"
    assert quoted_values(line) == ()  # '0.00' is the script's, not the failure's
    assert wrapper("Subwidget 0 raised KeyError: 'id'") == "Subwidget 0 raised"
    assert wrapper("django.core.exceptions.ImproperlyConfigured: Requested setting X") == ""
    assert wrapper("ModuleNotFoundError: No module named 'x'") == ""
    # Too little after the marker to be a failure of its own: the line signs whole.
    assert signature("Test 4 failed with error: 5") == "Test <n> failed with error: <n>"
    assert wrapper("Test 4 failed with error: 5") == ""


def test_a_caught_error_printed_after_its_context_is_an_error_line() -> None:
    line = SAME[-2][0]
    obs = f"Testing floatformat\n{line}\ndone"
    assert [full_error_line(obs, v) for v in error_lines(obs)] == [line]
    # The script's own source, shown by cat, prints it from a format string: not a failure.
    assert error_lines('    print(f"floatformat({v!r}) with error: {e}")') == []


def test_quoted_values() -> None:
    assert quoted_values("ModuleNotFoundError: No module named 'psycopg2'") == ("psycopg2",)
    assert quoted_values("UnicodeEncodeError: 'ascii' codec can't encode") == ("ascii",)
    assert quoted_values("no quotes here") == ()


KNOWN = [
    signature(line) or ""
    for line in (
        "ModuleNotFoundError: No module named 'psycopg2'",
        "AttributeError: 'list' object has no attribute 'x'",
        "KeyError: 'id'",
        "sqlite3.OperationalError: no such table: __main___book",
        "AssertionError: 1 != 2",
    )
]


@pytest.mark.parametrize(
    ("typed", "known", "values"),
    [
        # typed by hand without the quotes the logs print
        ("No module named psycopg2", "No module named <q>", ("psycopg2",)),
        (
            "list object has no attribute items",
            "<q> object has no attribute <q>",
            ("list", "items"),
        ),
        ("KeyError: foo", "KeyError: <q>", ("foo",)),
        # quoted where the logs print the name bare
        ("no such table: 'auth_user'", "no such table: <name>", ("auth_user",)),
        ("No Module Named psycopg2", "No module named <q>", ("psycopg2",)),  # any case
    ],
)
def test_a_failure_typed_with_other_quotes_finds_its_signature(
    typed: str, known: str, values: tuple[str, ...]
) -> None:
    asked = signature(typed)
    assert asked is not None and asked not in KNOWN
    assert closest_signature(asked, KNOWN) == known
    assert typed_values(typed, known) == values


@pytest.mark.parametrize(
    "typed",
    [
        "AssertionError: a != b",  # <n> stands for a number only
        "KeyError: a key typed out in many words here",  # the class alone is too little
        "No module named",  # the value is missing
        "a failure nobody has seen before",
    ],
)
def test_a_different_failure_finds_no_signature(typed: str) -> None:
    asked = signature(typed) or typed
    assert closest_signature(asked, KNOWN) is None


def test_a_message_pasted_in_part_finds_its_signature_when_enough_of_it_is_there() -> None:
    known = signature(SAME[0][0])
    assert known is not None and known.endswith("You must either define the")
    part = "Requested setting 'DATABASES', but settings are not configured."
    assert closest_signature(signature(part) or "", [known]) == known
    for too_little in ("Requested setting DATABASES", "Requested setting DATABASES, but"):
        assert closest_signature(signature(too_little) or "", [known]) is None


def test_the_closest_signature_is_found_among_many_that_start_alike() -> None:
    decoys = [f"<q> object has no attribute <q> in module{i} of package{i}" for i in range(5000)]
    right = "<q> object has no attribute <q>"
    assert closest_signature("dict object has no attribute iteritems", [*decoys, right]) == right


def test_the_exact_and_then_the_most_specific_signature_wins() -> None:
    exact = "No module named <name>"
    assert closest_signature(exact, ["No module named <q>", exact]) == exact
    loose = ["<q> object has no attribute <q>", "<q> object has no attribute <q> of <q>"]
    assert closest_signature("list object has no attribute x", loose) == loose[0]
    assert (
        closest_signature("NoneType object has no attribute x of y", loose) == loose[1]
    )  # both match; the one with more words of its own wins
    assert typed_values("No module named psycopg2 at all", "No module named <q> here") == ()


def test_a_traceback_ends_in_an_error_state_whatever_its_class() -> None:
    obs = (
        "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
        '  File "r.py", line 4, in <module>\n    from django.contrib.auth.models import User\n'
        "django.core.exceptions.ImproperlyConfigured: Requested setting INSTALLED_APPS, but "
        "settings are not configured.\n</output>"
    )
    w = Window("default", "t", 3, 2, "", "python r.py", obs, False, 0)
    errors = [s for s in HeuristicExtractor().extract(w).states if s.kind == "error"]
    assert [s.subject for s in errors] == ["django.core.exceptions.ImproperlyConfigured"]
    assert error_lines(obs) == [errors[0].value]


def test_full_error_line() -> None:
    obs = "x\nValueError: a long message that the extractor cut\ny"
    assert full_error_line(obs, "ValueError: a long") == (
        "ValueError: a long message that the extractor cut"
    )
    assert full_error_line(obs, "not there") == "not there"


# -- real lines ----------------------------------------------------------------------------------


def _corpus_errors(corpus: Path) -> dict[str, list[tuple[str, str]]]:
    """signature → (run, error line) for every error line of every traceback in the corpus."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for path in sorted(corpus.glob("*.traj.json")):
        run = path.name.removesuffix(".traj.json")
        for m in json.loads(path.read_text())["messages"]:
            content = m.get("content") or ""
            if m["role"] != "user" or ("Traceback" not in content and "error" not in content):
                continue
            for value in error_lines(content):
                line = full_error_line(content, value)
                sig = signature(line)
                if sig is not None:
                    out[sig].append((run, line))
    return out


@pytest.fixture(scope="module")
def corpus_errors(django_corpus: Path) -> dict[str, list[tuple[str, str]]]:
    return _corpus_errors(django_corpus)


def _runs(found: dict[str, list[tuple[str, str]]], pattern: str) -> dict[str, set[str]]:
    rx = re.compile(pattern)
    out: dict[str, set[str]] = defaultdict(set)
    for sig, hits in found.items():
        for run, line in hits:
            if rx.search(line):
                out[sig].add(run)
    return out


def test_real_improperly_configured_lines_share_one_signature(corpus_errors) -> None:
    # The corpus README: 7 runs hit "Requested setting …, but settings are not configured"
    # (six raised it, one printed it from an except block), with two setting names.
    found = _runs(corpus_errors, r"Requested setting \w+, but settings are not configured")
    assert len(found) == 1, found.keys()
    ((sig, runs),) = found.items()
    assert len(runs) == 7
    names = {
        m.group(1)
        for _, line in corpus_errors[sig]
        for m in [re.search(r"Requested setting (\w+)", line)]
        if m
    }
    assert {"INSTALLED_APPS", "USE_I18N"} <= names


def test_real_recurring_failures_match_across_runs_and_differ_from_each_other(
    corpus_errors,
) -> None:
    groups = {
        "apps": _runs(corpus_errors, r"AppRegistryNotReady: Apps aren't loaded yet"),
        "module": _runs(corpus_errors, r"ModuleNotFoundError: No module named"),
        "table": _runs(corpus_errors, r"OperationalError: no such table: "),
        "app_module": _runs(corpus_errors, r"The app module <.*> has no filesystem location"),
        "settings": _runs(corpus_errors, r"Requested setting \w+, but settings"),
    }
    for name, found in groups.items():
        assert len(found) == 1, (name, sorted(found))
        assert len(next(iter(found.values()))) >= 3, name  # recurs across runs
    signatures = [next(iter(found)) for found in groups.values()]
    assert len(set(signatures)) == len(signatures)
    # Table names differ per run (reproduce_app_foo, __main___book …); the signature does not.
    tables = {line.rsplit(": ", 1)[-1] for sig in groups["table"] for _, line in corpus_errors[sig]}
    assert len(tables) >= 10


def test_real_lines_of_one_class_can_be_different_failures(corpus_errors) -> None:
    for cls in ("ImproperlyConfigured", "AppRegistryNotReady", "OperationalError"):
        sigs = {sig for sig, hits in corpus_errors.items() for _, line in hits if f"{cls}:" in line}
        assert len(sigs) >= 2, cls


def test_real_agent_session_errors(agent_sessions: Path) -> None:
    """Claude Code's failed tool calls (is_error results): repeated failures match, different
    ones do not."""
    lines: list[str] = []
    for path in sorted((agent_sessions / "claude-code").glob("*.jsonl")):
        for raw in path.read_text().splitlines():
            record = json.loads(raw)
            content = (record.get("message") or {}).get("content")
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("is_error"):
                    body = part.get("content")
                    if isinstance(body, list):
                        body = "\n".join(x.get("text", "") for x in body if isinstance(x, dict))
                    lines.extend(str(body).splitlines())
    venv = [line for line in lines if line.startswith("/bin/bash: line 1: /tmp/review-tool")]
    assert len(venv) >= 2 and len({signature(line) for line in venv}) == 1
    uv = [line for line in lines if line.startswith("error: Failed to create virtual environment")]
    assert len(uv) >= 2 and len({signature(line) for line in uv}) == 1
    ls = next(line for line in lines if line.startswith("ls: cannot access"))
    rm = next(line for line in lines if line.startswith("rm: cannot remove"))
    assert len({signature(venv[0]), signature(uv[0]), signature(ls), signature(rm)}) == 4
