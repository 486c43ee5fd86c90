"""Verbatim identifier finder: the objects a window mentions, each an exact substring of it.

Precision over recall: an identifier becomes a graph node that links every turn mentioning
it, so a junk name (a single letter, an English word, a 5 KB blob) creates false links.
Every detector is a precompiled regex run once over the text (no per-line Python loops over
big observations), and every returned name is a slice of the input.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from typing import get_args

from trajgraph.extractors import shell
from trajgraph.extractors.shell import command_line_span
from trajgraph.schemas.extraction import ObjectKind

__all__ = ["command_line_span"]  # re-exported: the shell grammar's, used by the extractors

MAX_NAME = 200
MIN_NAME = 2
MAX_SQL_STARTS = 64
MAX_SQL_CHARS = 4000

# Kind preference: which kind wins when two detectors find the same name, and which objects a
# capped window keeps first.
KIND_PRIORITY: dict[str, int] = {
    "path": 0,
    "error": 1,
    "command": 2,
    "table": 3,
    "sql": 4,
    "column": 5,
    "url": 6,
    "element": 7,
    "number": 8,
    "symbol": 9,
    "quoted": 10,
    "key": 11,
    "other": 12,
}
assert set(KIND_PRIORITY) == set(get_args(ObjectKind))

# --- URLs ---------------------------------------------------------------------------------
_URL = re.compile(r"\b(?:https?|ftp|file|wss?)://[^\s\"'<>`\\)\]}]+")

# --- paths ----------------------------------------------------------------------------------
_EXTS = (
    "py|pyi|pyx|ipynb|js|mjs|cjs|ts|tsx|jsx|vue|svelte|json|jsonl|yaml|yml|toml|ini|cfg|conf|"
    "env|txt|md|rst|csv|tsv|html|htm|css|scss|less|xml|sql|sh|bash|zsh|c|h|cc|cpp|hpp|cs|java|"
    "kt|scala|go|rs|rb|php|swift|lock|log|traj|parquet|db|sqlite|sqlite3|pkl|gz|zip|tar|tgz|"
    "patch|diff|gradle|properties|proto|graphql|tf|lua|dart|pdf|png|jpg|jpeg|gif|svg|whl"
)
_HAS_EXT = re.compile(rf"\.(?:{_EXTS})$", re.IGNORECASE)
_SEG = r"[\w.@+~-]"
_ABS_PATH = re.compile(rf"(?<![\w.~/:@$<-])/{_SEG}+(?:/{_SEG}+)*/?")
_REL_PATH = re.compile(rf"(?<![\w.~/:@$-])(?:\.{{1,2}}/|~/)?[A-Za-z_.]{_SEG}*(?:/{_SEG}+)+/?")
_BARE_FILE = re.compile(rf"(?<![\w./@~-])\w[\w.-]*\.(?:{_EXTS})(?![\w/@-])", re.IGNORECASE)
_VERSION_SEGMENT = re.compile(r"^v?[\d.]+$")
# pytest node ids: tests/test_x.py::TestA::test_b[param]
_PYTEST_NODE = re.compile(r"(?<![\w./-])[\w./-]+\.py::[\w.:\[\]-]+")
# Well-known product names that look like files.
_PRODUCTS = "vue.js node.js next.js nuxt.js react.js express.js three.js d3.js chart.js socket.io"
_NOT_FILES = frozenset(_PRODUCTS.split())

# --- errors ---------------------------------------------------------------------------------
_ERROR_CLASS = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*\.){0,6}"
    r"(?:[A-Z]\w*?(?:Error|Exception|Interrupt|Exit|Warning)|\w*DoesNotExist)\b"
)

# --- quoted strings -----------------------------------------------------------------------
_QUOTED = re.compile(
    r"""(?<![\w\\])(?:"([^"\n\\]{2,80})"|'([^'\n\\]{2,80})'|`([^`\n]{2,80})`)(?!\w)"""
)
_KEY_AFTER = re.compile(r"[ \t]*:[ \t]*(?:[\"'{\[\d-]|true|false|null|None|True|False)")
_QUOTED_STOP = frozenset(
    {
        "EOF",
        "EOL",
        "END",
        "end_of_edit",
        "True",
        "False",
        "None",
        "true",
        "false",
        "null",
        "none",
        "undefined",
        "NaN",
    }
)
_PROSE = re.compile(r"^[a-z]+(?: [a-z]+)+$|[ ].*[.,;:!?]$")
_SELECTOR_CONTENT = re.compile(
    r"^(?:[#.][A-Za-z_-][\w-]*|\[[\w-]+[~|^$*]?=[^\]]*\])"  # '#app', '.item', '[data-id=3]'
    r"(?:[ >+~]*(?:[#.]?[A-Za-z_-][\w-]*|\[[^\]]*\]))*$"  # then descendants: '#app li.done'
)

# --- CSS / DOM elements -------------------------------------------------------------------
_CSS_RULE = re.compile(
    r"^[ \t]*([#.][A-Za-z_-][\w-]*"
    r"(?:[ \t]*[ ,>+~][ \t]*[#.]?[A-Za-z_-][\w-]*(?::[\w-]+)?)*)[ \t]*\{",
    re.M,
)
_ATTR_SELECTOR = re.compile(
    r"\[(?:(?:data|aria)-[\w-]+(?:[~|^$*]?=[^\]\n]{0,60})?"
    r"|(?:id|name|type|role|href|class|for|value|placeholder)[~|^$*]?=[^\]\n]{1,60})\]"
)
_HEX_COLOR = re.compile(r"^#[0-9a-fA-F]{3,8}$")

# --- SQL ------------------------------------------------------------------------------------
# SQL often sits JSON-escaped inside a tool call ("SELECT a\\nFROM t"): a literal \\n or \\t
# counts as whitespace and as a word boundary.
_SP = r"(?:\s|\\[nt])+"
_KW = r"(?:(?<=\\[nt])|\b)"
_SQL_START = re.compile(
    rf"{_KW}(?:SELECT|WITH|INSERT{_SP}INTO|UPDATE|DELETE{_SP}FROM|CREATE{_SP}(?:OR{_SP}REPLACE{_SP})?"
    rf"(?:TEMP(?:ORARY)?{_SP})?(?:TABLE|VIEW))\b",
    re.IGNORECASE,
)
_SQL_SHAPE = re.compile(
    rf"(?:SELECT{_SP}.{{1,1500}}?{_SP}FROM{_SP}|INSERT{_SP}INTO{_SP}|UPDATE{_SP}\S+{_SP}SET{_SP}"
    rf"|DELETE{_SP}FROM{_SP}|WITH{_SP}(?:RECURSIVE{_SP})?[\w\"]+{_SP}AS{_SP}?\(|CREATE{_SP})",
    re.IGNORECASE | re.DOTALL,
)
_SQL_END = re.compile(r";|\n[ \t]*\n|\\n\\n")
_JSON_STRING_END = re.compile(r'(?<!\\)"')
_SQL_IDENT = (
    r"(?:[A-Za-z_][\w$]*"  # bare
    r"|\\\"[^\"\\\n]{1,80}\\\""  # \"quoted\" inside a JSON string
    r"|\"[^\"\n]{1,80}\"|`[^`\n]{1,80}`|\[[^\]\n]{1,80}\])"
)
_SQL_TABLE = re.compile(
    rf"{_KW}(?:FROM|JOIN|INTO|UPDATE|TABLE){_SP}({_SQL_IDENT}(?:\.{_SQL_IDENT}){{0,3}})"
    r"(?![\w$.\"`\]])(?!\s*\()",  # whole identifier only, and not a table function
    re.IGNORECASE,
)
_SQL_SELECT_LIST = re.compile(
    rf"{_KW}SELECT{_SP}(.{{1,1500}}?){_SP}FROM\b", re.IGNORECASE | re.DOTALL
)
_SQL_COLUMN_ITEM = re.compile(
    rf"^(?:\s|\\[nt])*(?:DISTINCT{_SP})?(?:{_SQL_IDENT}\.)*({_SQL_IDENT})"
    rf"(?:{_SP}(?:AS{_SP})?({_SQL_IDENT}))?(?:\s|\\[nt])*$",
    re.IGNORECASE,
)
_SQL_ALIAS = re.compile(rf"\bAS{_SP}({_SQL_IDENT})(?:\s|\\[nt])*$", re.IGNORECASE)
# SQL keywords and English words that follow FROM/JOIN in prose: never table/column names.
_NOT_SQL_NAMES = (
    "select from where join inner outer left right full cross on using as and or not in is "
    "null lateral unnest flatten table only values dual with recursive distinct all any case "
    "when then else end by group order limit having union set into update delete insert "
    "create or replace view temp temporary if exists the a an this that it its there here "
    "which each my your our their these those file list now them"
)
_SQL_WORDS = frozenset(_NOT_SQL_NAMES.split())

# --- shell commands (the grammar: extractors/shell.py) --------------------------------------------
_TOKEN = re.compile(r"\S+")
_COMMAND_WORD = re.compile(r"^[\w./~-][\w.+:/~-]*$")
_PROMPT_LINE = re.compile(r"^[ \t]*\$[ \t]+(\S[^\n]*)", re.M)
_CALL_STYLE = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*\(")
_SENTENCE = re.compile(r"^[A-Z][a-z']*[ ,](?:\S+ ){3,}|^(?:\S+ ){5,}\S*[.?!:]$")
_SUBCOMMAND = re.compile(r"^[A-Za-z][\w:.-]*$")
_SCRIPT_ARG = re.compile(rf"^[\w./~-]+(?:\.(?:{_EXTS})|/[\w.-]+)$")

# --- numbers in context ------------------------------------------------------------------------
_NUMBER_CTX = re.compile(
    r"\b(?:(?:[Pp]ort|PORT|[Pp]id|PID)[ :=]{1,2}\d{2,6}"
    r"|HTTP/\d(?:\.\d)? \d{3}"
    r"|[Ss]tatus[ _-]?[Cc]ode[ :=]{1,2}\d{3}"
    r"|(?:[Ii]ssue|PR|[Pp]ull [Rr]equest|[Tt]icket) ?#\d{1,7}"
    r"|localhost:\d{2,5})\b"
)

_WORDCHAR = re.compile(r"\w")


def _plausible(name: str) -> bool:
    if len(name) < MIN_NAME or len(name) > MAX_NAME:
        return False
    return any(c.isalnum() for c in name)


class _Collector:
    """Dedupes by name: earliest position, most specific kind."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[int, ObjectKind]] = {}

    def add(self, pos: int, name: str, kind: ObjectKind) -> None:
        if not _plausible(name):
            return
        old = self.best.get(name)
        if old is None:
            self.best[name] = (pos, kind)
            return
        first = min(old[0], pos)
        better = kind if KIND_PRIORITY[kind] < KIND_PRIORITY[old[1]] else old[1]
        self.best[name] = (first, better)

    def result(self) -> list[tuple[str, ObjectKind]]:
        ordered = sorted(self.best.items(), key=lambda kv: (kv[1][0], kv[0]))
        return [(name, kind) for name, (_, kind) in ordered]


class _Spans:
    """Sorted, non-overlapping spans already claimed by URLs (paths inside them are skipped)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        self.starts.append(start)
        self.ends.append(end)

    def covers(self, pos: int) -> bool:
        i = bisect_right(self.starts, pos) - 1
        return i >= 0 and pos < self.ends[i]


def find_identifiers(text: str, *, action: bool = False) -> list[tuple[str, ObjectKind]]:
    """Identifiers in ``text`` as (verbatim name, kind), deduped, in first-occurrence order.

    ``action=True`` treats the text as an agent action: its command line yields command
    objects (``git diff``, ``pytest``, ``python reproduce.py``) whatever the command word.
    Otherwise commands are only taken from shell-prompt lines (``$ make test``).
    """
    if not text:
        return []
    out = _Collector()
    urls = _Spans()
    for m in _URL.finditer(text):
        name = m.group().rstrip(".,;:!?'\"")
        out.add(m.start(), name, "url")
        urls.add(m.start(), m.end())
    for pos, name in _paths(text, urls):
        out.add(pos, name, "path")
    for m in _ERROR_CLASS.finditer(text):
        out.add(m.start(), m.group(), "error")
    if "::" in text:
        for m in _PYTEST_NODE.finditer(text):
            out.add(m.start(), m.group().rstrip(".:-"), "symbol")
    for pos, name, kind in _quoted(text):
        out.add(pos, name, kind)
    for pos, name in _elements(text):
        out.add(pos, name, "element")
    for pos, name, kind in _sql(text):
        out.add(pos, name, kind)
    for m in _NUMBER_CTX.finditer(text):
        if not urls.covers(m.start()):
            out.add(m.start(), m.group(), "number")
    if action:
        line, offset = command_line_span(text)
        for pos, name in _commands(line):
            out.add(offset + pos, name, "command")
    else:
        for m in _PROMPT_LINE.finditer(text):
            for pos, name in _commands(m.group(1)):
                out.add(m.start(1) + pos, name, "command")
    return out.result()


def _paths(text: str, urls: _Spans) -> Iterator[tuple[int, str]]:
    is_diff = "diff --git " in text or "\n+++ " in text
    for m in _ABS_PATH.finditer(text):
        if urls.covers(m.start()):
            continue
        name = _trim_path(m.group())
        if len(name) > 1:
            yield m.start(), name
    for m in _REL_PATH.finditer(text):
        if urls.covers(m.start()):
            continue
        name, pos = _trim_path(m.group()), m.start()
        if is_diff and name.startswith(("a/", "b/")) and len(name) > 2:
            name, pos = name[2:], pos + 2  # "a/x.py" and "b/x.py" of a diff are both x.py
        if _relative_path_ok(name):
            yield pos, name
    for m in _BARE_FILE.finditer(text):
        name = m.group()
        if urls.covers(m.start()) or name.lower() in _NOT_FILES:
            continue
        before = text[max(0, m.start() - 7) : m.start()]
        if before.endswith(("from ", "import ")):
            continue  # "from django.conf import x": a module, not a file
        yield m.start(), name


def _trim_path(name: str) -> str:
    name = name.rstrip(".,:;")
    if len(name) > 1 and name.endswith("/"):
        name = name[:-1]
    return name


def _relative_path_ok(name: str) -> bool:
    # "and/or", "TCP/IP", "input/output" are prose: demand a file extension, an explicit
    # relative prefix, two slashes, or a segment shaped like a file-system name.
    if _HAS_EXT.search(name) or name.startswith(("./", "../", "~/")):
        return True
    if _VERSION_SEGMENT.match(name.rsplit("/", 1)[-1]):
        return False  # HTTP/1.1, TLS/1.2
    if name.count("/") >= 2:
        return True
    return any(c in name for c in "_-.")


def _quoted(text: str) -> Iterator[tuple[int, str, ObjectKind]]:
    for m in _QUOTED.finditer(text):
        group = 1 if m.group(1) is not None else 2 if m.group(2) is not None else 3
        content, pos = m.group(group), m.start(group)
        if len(content) > 2 and content[0] == content[-1] and content[0] in "'\"":
            content, pos = content[1:-1], pos + 1  # ``'x'`` (RST) quotes twice
        if (
            content != content.strip()
            or content.count(" ") > 3
            or "\t" in content
            or content in _QUOTED_STOP
            or (content.isdigit() and len(content) < 4)
            or (len(content) < 3 and content.islower())  # "no", "en", "ds"
            or _PROSE.search(content)  # "the dataset", "todo in todos", "the value."
        ):
            continue
        kind: ObjectKind = "quoted"
        if _SELECTOR_CONTENT.match(content) and not _HEX_COLOR.match(content):
            kind = "element"
        elif group == 1 and _KEY_AFTER.match(text, m.end()):
            kind = "key"
        elif _is_id_attribute(text, m.start()):
            kind = "element"
        elif _HAS_EXT.search(content) and " " not in content and "://" not in content:
            kind = "path"
        yield pos, content, kind


def _is_id_attribute(text: str, quote_pos: int) -> bool:
    """The quoted string is the value of an HTML ``id=`` attribute."""
    return text.endswith("id=", 0, quote_pos) and not text[quote_pos - 4 : quote_pos - 3].isalnum()


def _elements(text: str) -> Iterator[tuple[int, str]]:
    for m in _CSS_RULE.finditer(text):
        sel = m.group(1)
        if not _HEX_COLOR.match(sel) and len(sel) <= 80:
            yield m.start(1), sel
    for m in _ATTR_SELECTOR.finditer(text):
        yield m.start(), m.group()


def _sql(text: str) -> Iterator[tuple[int, str, ObjectKind]]:
    pos = 0
    # Every candidate start scans at most MAX_SQL_CHARS; bounding their number keeps a text full
    # of "SELECT" words linear.
    budget = MAX_SQL_STARTS
    while budget > 0:
        m = _SQL_START.search(text, pos)
        if m is None:
            return
        if not _sql_start_ok(text, m):
            pos = m.end()
            continue
        budget -= 1
        limit = m.start() + MAX_SQL_CHARS
        end_m = _SQL_END.search(text, m.end(), limit)
        end = end_m.start() if end_m else min(len(text), limit)
        if m.start() > 0 and text[m.start() - 1] == '"':
            # A statement inside a JSON string ends at its closing (unescaped) quote.
            q = _JSON_STRING_END.search(text, m.end(), end)
            end = q.start() if q else end
        stmt = text[m.start() : end]
        if not _SQL_SHAPE.match(stmt):
            pos = m.end()
            continue
        if len(stmt) <= MAX_NAME and "\n" not in stmt and "\\n" not in stmt and _has_sql_body(stmt):
            yield m.start(), stmt.rstrip(), "sql"
        yield from _sql_tables(stmt, m.start())
        yield from _sql_columns(stmt, m.start())
        pos = max(end, m.end())


def _sql_start_ok(text: str, m: re.Match[str]) -> bool:
    word = m.group()
    if word.isupper():
        return True
    # Lower/mixed case "select", "with", "update" are common English: accept them only at the
    # start of a line, a string, or after "(" -- where a statement would begin.
    i = m.start() - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in "\n\"'`(:" or text[max(0, i - 1) : i + 1] == "\\n"


def _has_sql_body(stmt: str) -> bool:
    upper = stmt.upper()
    return " FROM " in upper or " SET " in upper or " VALUES" in upper or "(" in upper


def _sql_tables(stmt: str, offset: int) -> Iterator[tuple[int, str, ObjectKind]]:
    for m in _SQL_TABLE.finditer(stmt):
        name = m.group(1)
        if name.lower() in _SQL_WORDS or stmt.startswith(" import", m.end()):
            continue
        yield offset + m.start(1), name, "table"


def _sql_columns(stmt: str, offset: int) -> Iterator[tuple[int, str, ObjectKind]]:
    m = _SQL_SELECT_LIST.search(stmt)
    if m is None:
        return
    count = 0
    start = m.start(1)
    for item, item_pos in _split_top_level(m.group(1), start):
        cm = _SQL_COLUMN_ITEM.match(item)
        if cm is not None:
            group = 2 if cm.group(2) else 1
            name, pos = cm.group(group), item_pos + cm.start(group)
        else:
            am = _SQL_ALIAS.search(item)
            if am is None:
                continue
            name, pos = am.group(1), item_pos + am.start(1)
        name, pos = _unquote_ident(name, pos)
        if name.lower() in _SQL_WORDS:
            continue
        yield offset + pos, name, "column"
        count += 1
        if count >= 12:
            return


def _unquote_ident(name: str, pos: int) -> tuple[str, int]:
    """Column names without their quoting, so "x" and \\"x\\" and x are one object."""
    if name.startswith('\\"') and len(name) > 4:
        return name[2:-2], pos + 2
    if name[0] in '"`[' and len(name) > 2:
        return name[1:-1], pos + 1
    return name, pos


def _split_top_level(select_list: str, base: int) -> Iterator[tuple[str, int]]:
    depth, start = 0, 0
    for i, c in enumerate(select_list):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            yield select_list[start:i], base + start
            start = i + 1
    yield select_list[start:], base + start


def command_line(action: str, max_chars: int = 80) -> str:
    """The command line cut to ``max_chars`` at a word boundary: a verbatim state subject."""
    line, _ = command_line_span(action)
    return truncate_words(line, max_chars)


def truncate_words(text: str, max_chars: int) -> str:
    """A prefix of ``text`` of at most ``max_chars``, cut at a space when one is near the end."""
    if len(text) <= max_chars:
        return text
    cut = text.rfind(" ", 0, max_chars + 1)
    if cut < max_chars // 2:
        cut = max_chars
    return text[:cut].rstrip()


def _commands(line: str) -> Iterator[tuple[int, str]]:
    """Commands of one command line: command word (+ subcommand or script)."""
    call = _CALL_STYLE.match(line)
    if call is not None and not line.lstrip().startswith(("(", "$(")):
        yield call.start(1), call.group(1)  # tool-call style: get_user_details({...})
        return
    if _SENTENCE.match(line):
        return  # a chat message, not a command line
    seg_start = 0
    found = 0
    for sep_start, sep_end in [*shell.separators(line), (len(line), len(line))]:
        cmd = _segment_command(line, seg_start, sep_start)
        if cmd is not None:
            yield cmd
            found += 1
            if found >= 4:
                return
        seg_start = sep_end


def _segment_command(line: str, start: int, end: int) -> tuple[int, str] | None:
    tokens = [(m.start(), m.group()) for m in _TOKEN.finditer(line, start, end)]
    i = 0
    while i < len(tokens) and (
        shell.is_assignment(tokens[i][1]) or tokens[i][1] in shell.PREFIX_WORDS
    ):
        i += 1
    if i < len(tokens) and tokens[i][1] == "timeout":
        i += 2 if i + 1 < len(tokens) and tokens[i + 1][1][:1].isdigit() else 1
    if i >= len(tokens):
        return None
    pos, word = tokens[i]
    if word in shell.SHELL_PLUMBING or not _COMMAND_WORD.match(word) or not _WORDCHAR.search(word):
        return None
    if word[0].isupper() and word.isalpha():
        return None  # "The", "Here": prose, not a command
    last = i
    base = word.rsplit("/", 1)[-1]
    nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
    if base in shell.SUBCOMMAND_TOOLS and _SUBCOMMAND.match(nxt):
        last = i + 1
    elif shell.is_interpreter(word):
        if nxt == "-m" and i + 2 < len(tokens) and _SUBCOMMAND.match(tokens[i + 2][1]):
            last = i + 2
        elif _SCRIPT_ARG.match(nxt):
            last = i + 1
    end_pos = tokens[last][0] + len(tokens[last][1])
    return pos, line[pos:end_pos]
