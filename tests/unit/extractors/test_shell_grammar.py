"""One command is one thing everywhere (extractors/shell.py): real commands from the shared
logs (../shared: mini-swe-agent, SWE-agent, OpenHands, Claude Code, τ-bench), each with the
one classification that extraction (heuristic file changes), what an action is (read-only or
not, its canonical kind), lessons (run heads) and the reminders (writes_path) must all give."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from trajgraph.extractors import shell
from trajgraph.extractors.actions import canonical, is_read_only, writes_path
from trajgraph.extractors.heuristic import _file_changes
from trajgraph.extractors.resolutions import run_heads


@dataclass(frozen=True)
class Row:
    command: str
    kind: str  # read | check | edit | files | run | call
    heads: tuple[str, ...] = ()  # what lessons see it run
    files: tuple[str, ...] = ()  # the files extraction says it changed


REAL = [
    Row("nl -ba django/contrib/sitemaps/__init__.py | sed -n '150,180p'", "read",
        ("nl django/contrib/sitemaps/__init__.py", "sed 150,180p")),
    Row('grep -r "class MiddlewareMixin" django/', "read", ("grep class MiddlewareMixin",)),
    Row('find django/contrib/sitemaps -name "tests.py"', "read",
        ("find django/contrib/sitemaps",)),
    Row("sed -n '1070,1080p' django/db/models/sql/query.py | cat -A", "read",
        ("sed 1070,1080p", "cat")),
    Row('ls -R | grep ":$" | head -n 5', "read", ("ls", "grep :$", "head")),
    Row("git diff", "read", ("git diff",)),
    Row("cat <<'EOF' > reproduce_issue.py\nimport django\nEOF", "edit",
        files=("reproduce_issue.py",)),
    Row("cat <<'EOF' >> tests/staticfiles_tests/test_storage.py\n    pass\nEOF", "edit",
        files=("tests/staticfiles_tests/test_storage.py",)),
    Row("sed -i '264i\\        substitutions = False' django/contrib/staticfiles/storage.py",
        "edit", files=("django/contrib/staticfiles/storage.py",)),
    Row("sed -i 's/        pass/        pass\\n/' django/utils/deprecation.py", "edit",
        files=("django/utils/deprecation.py",)),
    Row("create reproduce_bug.py", "edit", files=("reproduce_bug.py",)),
    Row("rm reproduce_issue.py test_typeerror.py test_none_items.py", "files",
        files=("reproduce_issue.py", "test_typeerror.py", "test_none_items.py")),
    Row("python3 reproduce_issue.py", "run", ("python reproduce_issue.py",)),
    Row("cd tests && python3 runtests.py queries", "check", ("python runtests.py",)),
    Row("cd /workspace/todo-app && python3 -m http.server 8000", "run",
        ("python http.server",)),
    Row('python3 -c "', "run", ("python -c",)),  # the first line of a multi-line -c
    Row("uv pip install -e . 2>&1 | tail -5", "run", ("uv pip", "tail -5")),
    Row("git checkout django/core/validators.py", "run", ("git checkout",)),
    Row("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached", "run",
        ("git add", "git diff")),
    Row('get_user_details({"user_id":"mia_li_3668"})', "call", ("get_user_details",)),
]  # fmt: skip


@pytest.mark.parametrize("row", REAL, ids=[r.command[:40] for r in REAL])
def test_a_real_command_is_one_thing_everywhere(row: Row) -> None:
    assert is_read_only(row.command) == (row.kind in ("read", "check", "call"))
    assert is_read_only(row.command, checks=False) == (row.kind in ("read", "call"))
    assert canonical(row.command).kind == (
        "block" if "\n" in row.command else "call" if row.kind == "call" else "shell"
    )
    assert tuple(run_heads(row.command)) == row.heads
    changed = tuple(d.subject for d in _file_changes(row.command, ""))
    assert changed == row.files
    for path in row.files:
        assert writes_path(row.command, path) == (row.kind == "edit"), path
    line = row.command.split("\n", 1)[0]
    assert shell.is_in_place_edit(line) == line.startswith("sed -i")


# The decisions where the readers used to disagree (extractors/shell.py's docstring).
def test_unbalanced_quotes_give_the_words_as_they_stand() -> None:
    assert shell.words('rm -rf "build') == ("rm", "-rf", '"build')
    assert not is_read_only('rm -rf "build')  # was read-only: no tokens, no command
    assert canonical("echo don't && ls").kind == "shell"
    assert shell.command_segments("echo don't && ls") == [["echo", "don't"], ["ls"]]


@pytest.mark.parametrize(
    ("line", "in_place"),
    [
        ("sed -i 's/a/b/' f.py", True),
        ("sed -i.bak 's/a/b/' f.py", True),
        ("sed --in-place 's/a/b/' f.py", True),
        ("sed -E -i 's/a+/b/' f.py", True),  # a flag before -i: missed by all three before
        ("sed -Ei 's/a+/b/' f.py", True),
        ("sed -n '1,5p' f.py", False),
        ("sed -e 's/a/b/' f.py", False),
    ],
)
def test_sed_in_place_is_one_rule(line: str, in_place: bool) -> None:
    assert bool(shell.SED_IN_PLACE.search(line)) == in_place
    assert shell.sed_in_place(list(shell.words(line))) == in_place
    assert is_read_only(line) == (not in_place)


def test_an_escaped_delimiter_stays_in_the_substitution() -> None:
    m = shell.SED_SUBST.search(r"sed -i 's/a\/b/c\/d/' f.py")
    assert m is not None and (m.group(2), m.group(3)) == (r"a\/b", r"c\/d")


def test_edit_words_are_one_list() -> None:
    assert {"undo_edit", "apply_patch", "str_replace", "create"} <= shell.EDIT_TOOLS
    assert shell.EDIT_WORDS == shell.EDIT_TOOLS | shell.FILE_WRITERS
    assert shell.is_file_write(["undo_edit", "f.py"])
    assert shell.is_file_write(["cat", "<<EOF", ">", "f.py"])
    assert not shell.is_file_write(["cat", "f.py"])


def test_arrows_and_descriptors_are_not_writes() -> None:
    assert is_read_only('echo "a -> b"')  # an arrow in text
    assert is_read_only("ls 2>&1")
    assert not is_read_only("echo x > out.txt")
    assert shell.command_segments("pytest -x 2>&1 | tail") == [["pytest", "-x"], ["tail"]]


def test_quoted_separators_do_not_split_commands() -> None:
    from trajgraph.extractors.identifiers import find_identifiers

    found = find_identifiers("grep -E 'a|plot' data.csv && ls", action=True)
    assert [n for n, k in found if k == "command"] == ["grep", "ls"]


_COMMAND_WORDS = (
    shell.EDIT_TOOLS
    | shell.FILE_WRITERS
    | shell.CHECK_COMMANDS
    | shell.TEST_SUBCOMMAND_TOOLS
    | shell.READ_ONLY_COMMANDS
    | shell.QUIET_COMMANDS
    | shell.VIEWERS
    | {p.strip() for p in shell.EDIT_CALL_PREFIXES}
)


def _word_lists(path: Path) -> Iterator[tuple[int, set[str]]]:
    """(line, command words) of every module-level constant that is a list of them: three or
    more, and most of its words (prose and SQL keyword lists name a few in passing)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        spelled: list[str] = []
        for leaf in ast.walk(node.value):
            if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                spelled += leaf.value.split()
        words = set(spelled) & _COMMAND_WORDS
        if len(words) >= 3 and 2 * len(words) >= len(set(spelled)):
            yield node.lineno, words


def test_command_word_lists_are_declared_in_shell_only() -> None:
    """Edit, test-runner, read-only and viewer words live in extractors/shell.py; the readers
    (actions, resolutions, heuristic, the memory queries, the benches) import them (issue 41)."""
    root = Path(__file__).resolve().parents[3]
    folders = ["trajgraph/extractors", "trajgraph/queries", "trajgraph/graph", "bench"]
    found = [
        f"{path.relative_to(root)}:{line} {sorted(words)}"
        for folder in folders
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "shell.py" and "retrieval" not in path.parts
        for line, words in _word_lists(path)
    ]
    assert found == [], "\n".join(found)
    assert list(_word_lists(root / "trajgraph/extractors/shell.py")), "the check finds lists"


@pytest.mark.parametrize(
    ("word", "test"),
    [
        ("pytest", True),
        ("tox", True),
        ("tests/runtests.py", True),
        ("foo_test.py", True),
        ("python", False),
        ("pytest.ini", False),
        ("latest.py", False),
    ],
)
def test_a_test_word_is_one_rule(word: str, test: bool) -> None:
    assert shell.is_test_word(word) is test
