"""The one shell grammar: how an agent's command line is read, wherever it is read.

Extraction (extractors/heuristic.py, extractors/identifiers.py), what an action is
(extractors/actions.py), failure resolutions and lessons (extractors/resolutions.py) and the
reminders all ask the same questions of a command: its words, its commands, whether it edits
a file and which, what a ``sed -i`` or a heredoc writes. They ask them here, as httpx asks
every URL question of ``httpx/_urlparse.py``, so that one command is one thing everywhere.

Decisions where the readers used to disagree:

* **Unbalanced quotes** (a command cut short, ``echo don't``): the words as they stand
  (whitespace-split, operators split off), never "not a command": ``rm -rf "build`` is still
  an ``rm``, not a read-only action and not a block of text.
* **Word lists** (edit tools, test runners, read-only and quiet commands, viewers) are
  declared here only; every reader imports them.
* **Edit words**: ``EDIT_TOOLS`` are the agent's editor commands (SWE-agent's ``edit``,
  OpenHands' ``str_replace``, ``undo_edit``, ``apply_patch``...): the action edits a file
  whatever else it says. ``FILE_WRITERS`` are shell programs that write a file only when
  redirected, given ``-i`` or fed a heredoc (``cat``, ``tee``, ``sed``, ``patch``...).
* **sed in place**: ``-i``, ``-i.bak``, ``--in-place`` and combined flags (``-Ei``,
  ``-ni``), also after other flags (``sed -E -i``); a substitution's delimiter may be
  escaped inside it (``s/a\\/b/c/``).
* **Redirects** that write: ``>`` and ``>>`` to a file, not ``2>&1``, ``>&2`` nor an arrow in
  text (``->``, ``=>``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from functools import lru_cache

OPERATORS = frozenset({"&&", "||", ";", "|", "&"})
SEPARATOR = re.compile(r"&&|\|\||[;|]")  # between the commands of one line
_CACHE = 4096  # lexing is a pure function asked again and again for the same actions

# -- words ----------------------------------------------------------------------------------------

_EDIT_TOOLS = "edit create str_replace insert write append undo_edit write_file apply_patch"
EDIT_TOOLS = frozenset(_EDIT_TOOLS.split())
# The editor commands that change a file that was there before (not a new one).
EDITS_IN_PLACE = frozenset({"str_replace", "edit", "insert", "patch"})
_FILE_WRITERS = "cat echo printf tee sed patch ed ex"
FILE_WRITERS = frozenset(_FILE_WRITERS.split())
EDIT_WORDS = EDIT_TOOLS | FILE_WRITERS  # what writes files (see is_file_write)
# File-system commands: their arguments are paths they create, move or remove (the last one
# for mv, cp and ln); chmod changes a file's mode, not what it holds.
_FILE_COMMANDS = "mkdir touch rm mv cp ln chmod"
FILE_COMMANDS = frozenset(_FILE_COMMANDS.split())
# A word that can be a path (no quotes, spaces, globs or shell syntax).
PATHISH = re.compile(r"^[\w./~-][\w./~@+-]*$")
# Words before the program that do not change which program runs.
PREFIX_WORDS = frozenset({"sudo", "time", "env", "nohup", "exec", "command", "xargs"})
_INTERPRETER_WORDS = "python python2 python3 node bash sh zsh ruby perl php go java ts-node tsx"
INTERPRETERS = frozenset(_INTERPRETER_WORDS.split())
# Shell words that are syntax or plumbing, not the command acted with.
_SHELL_PLUMBING = (
    "cd echo export set true false sleep source . exit then do done fi if for while else elif "
    "in case esac { } printf wait unset alias return local declare"
)
SHELL_PLUMBING = frozenset(_SHELL_PLUMBING.split())
# Tools whose first argument is a subcommand worth keeping: "git diff", "npm run".
_TOOLS_WITH_SUBCOMMANDS = (
    "git pip pip3 npm npx yarn pnpm docker docker-compose kubectl cargo go conda poetry uv apt "
    "apt-get brew gh make dotnet mvn gradle bundle rails rake terraform helm systemctl "
    "django-admin tox nox hatch pdm rustup bun deno composer mix stack cabal"
)
SUBCOMMAND_TOOLS = frozenset(_TOOLS_WITH_SUBCOMMANDS.split())
# How the adapters render an edit tool's call (pipelines/adapters/claude_code.py, codex.py):
# an action that starts with one of these is an edit.
EDIT_CALL_PREFIXES = ("edit ", "write ", "apply_patch")
# Test runs: a runner (`pytest`), a tool's test subcommand (`npm test`, `go vet`), a test
# module (`python -m pytest`) or a test script (`python tests/runtests.py`); see is_test_word.
_TEST_RUNNERS = "pytest py.test tox nox"
TEST_RUNNERS = frozenset(_TEST_RUNNERS.split())
TEST_MODULES = frozenset({"pytest", "unittest"})
_TEST_SUBCOMMAND_TOOLS = "npm yarn pnpm go cargo make mvn gradle dotnet"
TEST_SUBCOMMAND_TOOLS = frozenset(_TEST_SUBCOMMAND_TOOLS.split())
TEST_SUBCOMMANDS = frozenset({"test", "check", "lint", "vet"})
TEST_SCRIPT = re.compile(r"(?:^|/)(?:test_[\w-]*|[\w-]*_test|runtests|tests?)\.py$")
# Commands that re-check things (test runners, checksums, linters): they change nothing a
# re-run depends on.
_CHECKERS = "sha256sum sha1sum md5sum cksum shasum mypy ruff flake8 pylint"
CHECK_COMMANDS = TEST_RUNNERS | frozenset(_CHECKERS.split())
# Commands that only look at things (cd: only where the next command runs).
_READ_ONLY = (
    "cat nl head tail less more grep egrep fgrep rg ag ls ll tree find locate file stat wc "
    "du df pwd whoami which type echo printf diff cmp sort uniq cut awk jq yq env printenv "
    "date id uname hostname ps top free history man help open goto scroll_up scroll_down "
    "search_file search_dir find_file view read think calculate submit sed cd"
)
READ_ONLY_COMMANDS = frozenset(_READ_ONLY.split())
_READ_ONLY_GIT = "status diff log show blame grep ls-files branch remote rev-parse"
READ_ONLY_GIT = frozenset(_READ_ONLY_GIT.split())
# Agent tool calls that only read: these names, and names with these prefixes.
READ_ONLY_CALLS = frozenset({"think", "calculate", "view", "read_file", "glob", "ls"})
READ_ONLY_CALL_PREFIXES = ("get_", "search_", "list_", "find_", "read_", "view_", "fetch_")
# Commands that neither change what a re-run depends on nor do the work.
_QUIET_COMMANDS = "cd echo true false sleep clear"
QUIET_COMMANDS = frozenset(_QUIET_COMMANDS.split())
# Commands whose output is content (a file, a listing, search hits), not a result.
_VIEWERS = (
    "cat nl head tail less more sed awk grep rg ls find tree open view read goto scroll_up "
    "scroll_down search_file search_dir find_file diff git"
)
VIEWERS = frozenset(_VIEWERS.split())
FILE_VIEWERS = frozenset({"cat", "head", "less", "more", "bat"})  # `cat FILE` shows FILE
# Commands after a pipe that only change how the output is shown.
_OUTPUT_FILTERS = "head tail less more cat grep egrep fgrep sort uniq wc cut column nl sed awk"
OUTPUT_FILTERS = frozenset(_OUTPUT_FILTERS.split())
# Flags that only change how much a command says (dropped from an action's canonical form).
_QUIET_FLAGS = (
    "-q -qq -v -vv -vvv -s --quiet --verbose --no-header -rA -ra --disable-warnings --no-color -x"
)
QUIET_FLAGS = frozenset(_QUIET_FLAGS.split())
QUIET_FLAG_PREFIXES = ("--tb=", "--color=", "--log-level=", "-W")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")


def program(word: str) -> str:
    """The program a command word names: ``/usr/bin/python3.11`` → ``python``, ``node18`` →
    ``node`` (an interpreter's version left out), ``./run.sh`` → ``run.sh``."""
    base = word.rsplit("/", 1)[-1]
    stem = re.sub(r"[\d.]+$", "", base)
    return stem if stem in INTERPRETERS else base


def is_interpreter(word: str) -> bool:
    """``python``, ``python3.11``, ``/usr/bin/node``, ``bash`` ...: runs the script it is given."""
    return program(word) in INTERPRETERS


def is_test_word(word: str) -> bool:
    """The command word runs tests: ``pytest``, ``tox``, ``tests/runtests.py``, ``foo_test.py``."""
    return word in TEST_RUNNERS or bool(TEST_SCRIPT.search(word))


def is_assignment(word: str) -> bool:
    """``NAME=value`` (before a program: an environment setting, not an argument)."""
    return bool(_ENV_ASSIGN.match(word))


# -- the lexer -----------------------------------------------------------------------------------


@lru_cache(maxsize=_CACHE)
def words(line: str) -> tuple[str, ...]:
    """The tokens of one command line as a POSIX shell reads them (quotes removed; ``;``,
    ``&``, ``|``, ``&&`` and ``||`` tokens of their own). Unbalanced quotes: the words as
    they stand, operators split off (see the module docstring)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        return tuple(lexer)
    except ValueError:  # unbalanced quotes (or an escape at the very end)
        return tuple(t for t in re.split(r"\s+|(&&|\|\||[;&|])", line) if t)


def segments(tokens: tuple[str, ...] | list[str]) -> list[tuple[str, list[str]]]:
    """(operator before the segment, its tokens) for every non-empty segment."""
    out: list[tuple[str, list[str]]] = []
    op = ""
    current: list[str] = []
    for tok in tokens:
        if tok in OPERATORS or (tok and set(tok) <= set(";&|")):
            out.append((op, current))
            op, current = tok, []
        else:
            current.append(tok)
    out.append((op, current))
    return [(o, seg) for o, seg in out if seg]


def unquoted_lines(text: str) -> tuple[str, ...]:
    """``text`` split at newlines that are not inside quotes (``python -c "…"`` keeps its
    code), with the newlines inside quotes kept as they are."""
    return _unquoted_lines(text)


@lru_cache(maxsize=_CACHE)
def _unquoted_lines(text: str) -> tuple[str, ...]:
    lines: list[str] = []
    quote = ""
    start = 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "\n":
            lines.append(text[start:i])
            start = i + 1
    lines.append(text[start:])
    return tuple(lines)


def separators(line: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every command separator of ``line`` outside quotes."""
    i = 0
    while True:
        at = unquoted_separator(line, i)
        if at >= len(line):
            return
        m = SEPARATOR.match(line, at)
        assert m is not None  # unquoted_separator stops only at one
        yield at, m.end()
        i = m.end()


def unquoted_separator(line: str, start: int) -> int:
    """Index of the first command separator at or after ``start`` that is not inside quotes
    (sed scripts such as ``s|a|b|`` use the pipe as a delimiter); ``len(line)`` if none."""
    quote = ""
    for i in range(start, len(line)):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif SEPARATOR.match(line, i):
            return i
    return len(line)


# -- the command line of an action ----------------------------------------------------------------

TOOL_CALL = re.compile(r"^([A-Za-z_][\w.-]*)\((.*)\)$", re.DOTALL)
COMMAND_KEYS = ("command", "cmd")  # a tool call's argument that holds a shell command
# In raw text (tool-call JSON left as it was written): the string of a command-like key.
_JSON_COMMAND = re.compile(
    r"[\"'](?:command|cmd|code|sql|query|script)[\"']\s*[:=]\s*\"((?:[^\"\\\n]|\\.)+)\""
)


def canonical_command(action: str) -> str:
    """The shell command an action runs: the ``command`` (or ``cmd``) argument of a tool
    call, or the action's text."""
    text = (action or "").strip()
    call = TOOL_CALL.match(text)
    if call is not None:
        try:
            args = json.loads(call.group(2))
        except (ValueError, RecursionError):
            args = None
        if isinstance(args, dict):
            for key in COMMAND_KEYS:
                if isinstance(args.get(key), str):
                    return str(args[key]).strip()
    return text


def command_line_span(action: str) -> tuple[str, int]:
    """The action's command line (verbatim) and its offset in ``action``.

    A ``"command": "..."`` argument (tool-call JSON) wins; otherwise the first non-empty line.
    Heredoc bodies, edit blocks and later lines are not command lines.
    """
    m = _JSON_COMMAND.search(action)
    if m is not None:
        raw = m.group(1)
        cut = raw.find("\\n")
        return (raw[:cut] if cut >= 0 else raw), m.start(1)
    pos = 0
    for line in action.splitlines(keepends=True):
        stripped = line.strip()
        if stripped:
            return stripped, pos + line.index(stripped[0])
        pos += len(line)
    return "", 0


# -- what writes files ---------------------------------------------------------------------------

# Redirects that write a file: not 2>&1 / >&2 (a descriptor), not an arrow in text (-> =>).
WRITE_REDIRECT = re.compile(r"(?<![\d&<>=-])>{1,2}(?!&)[ \t]*([^\s;&|<>'\"()]+)")
STDERR_REDIRECT = re.compile(r"\s\d?>&\d\b|\s2>\s*/dev/null\b|\s&>\s*/dev/null\b")
# sed's in-place flag: -i, -i.bak, --in-place, combined (-Ei, -ni), after other flags.
_IN_PLACE_FLAG = r"(?:-[A-Za-hj-z]*i\S*|--in-place\S*)"
SED_IN_PLACE = re.compile(rf"\bsed\s+(?:-[A-Za-hj-z]+\s+)*{_IN_PLACE_FLAG}(?=\s|$)")
_IN_PLACE_TOKEN = re.compile(rf"^{_IN_PLACE_FLAG}$")
# s/pattern/replacement/ with any of sed's usual delimiters (escaped inside: \/).
SED_SUBST = re.compile(
    r"(?<![A-Za-z])s([/|#,:@])((?:\\.|(?!\1).){1,200})\1((?:\\.|(?!\1).){0,200})\1"
)
HEREDOC = re.compile(
    r"<<-?[ \t]*(['\"]?)(\w+)\1[ \t]*>{1,2}[ \t]*(\S+)[^\n]*\n(.*?)\n[ \t]*\2[ \t]*$",
    re.S | re.M,
)
HEREDOC_TO = re.compile(
    r">{1,2}[ \t]*(\S+)[ \t]*<<-?[ \t]*(['\"]?)(\w+)\2[^\n]*\n(.*?)\n[ \t]*\3[ \t]*$",
    re.S | re.M,
)
_HEREDOC_BODY = re.compile(r"(<<-?[ \t]*(['\"]?)(\w+)\2[^\n]*)\n.*?\n[ \t]*\3[ \t]*$", re.S | re.M)


def sed_in_place(seg: list[str] | tuple[str, ...]) -> bool:
    """A ``sed`` segment's tokens edit its file in place."""
    return bool(seg) and program(seg[0]) == "sed" and any(_IN_PLACE_TOKEN.match(t) for t in seg)


def is_in_place_edit(line: str) -> bool:
    """The line edits a file that was there before: ``sed -i`` or an in-place editor
    command (``str_replace``, ``edit``, ``insert``, ``patch``)."""
    first = line.split(None, 1)[0] if line.strip() else ""
    return first in EDITS_IN_PLACE or bool(SED_IN_PLACE.search(line))


def is_file_write(seg: list[str] | tuple[str, ...]) -> bool:
    """A segment that writes a file with a FILE_WRITERS program or an editor command: a
    redirect or heredoc in it, ``sed -i``, or an EDIT_TOOLS word."""
    if not seg:
        return False
    word = program(seg[0])
    if word in EDIT_TOOLS:
        return True
    return word in FILE_WRITERS and (
        sed_in_place(seg) or any(t.startswith(("<<", ">")) or t == "-i" for t in seg)
    )


def heredoc_writes(action: str) -> list[tuple[str, str]]:
    """(path, content) of every ``cat <<'EOF' > path`` (or ``> path <<EOF``) in the action."""
    out = [(m.group(3), m.group(4)) for m in HEREDOC.finditer(action)]
    out += [(m.group(1), m.group(4)) for m in HEREDOC_TO.finditer(action)]
    return out


def without_heredoc_bodies(text: str) -> str:
    """``text`` with every heredoc's body (and its end marker) left out."""
    return _HEREDOC_BODY.sub(r"\1", text)


def command_segments(action: str) -> list[list[str]]:
    """Token lists of every command the action runs: heredoc bodies left out, continued
    lines joined, split at unquoted newlines, ``&&``, ``||``, ``;``, ``&`` and pipes."""
    text = without_heredoc_bodies(canonical_command(action)).replace("\\\n", " ")
    out: list[list[str]] = []
    for line in unquoted_lines(text):
        if line.strip():
            # 2>&1 is a redirect, not "2>", "&", "1": a command "1" after a background "&".
            plain = STDERR_REDIRECT.sub(" ", " " + line).strip()
            out.extend(seg for _, seg in segments(words(plain)))
    return out
