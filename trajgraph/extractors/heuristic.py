"""The offline, deterministic extractor: regexes over one window, no model.

States are read from the current observation (and its difference to the previous one):
exit codes, error lines, test summaries / HTTP status, file edits made by the action, changed
``key=value`` / JSON fields, and added/removed lines of diffs and lists. Objects are the
verbatim identifiers of the action and the current observation. Every state value and
object name is a slice of the window's action or observations, so it is verbatim in
``Window.text()`` by construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from trajgraph.extractors import shell
from trajgraph.extractors.base import WindowByWindow
from trajgraph.extractors.identifiers import (
    KIND_PRIORITY,
    command_line,
    command_line_span,
    find_identifiers,
    truncate_words,
)
from trajgraph.extractors.windows import Window
from trajgraph.schemas.extraction import (
    AssociationItem,
    CauseItem,
    ObjectItem,
    ObjectKind,
    StateItem,
    StateKind,
    WindowExtraction,
)

MAX_STATES = 12
MAX_OBJECTS = 25
MAX_ERRORS = 4
MAX_STATUS = 2
MAX_FILES = 3
MAX_VALUES = 6
MAX_LINES_EACH = 5
MAX_OUTPUT_LINES = 5
MAX_RESULT_COMMAS = 4
# Files whose key=value lines are settings (a source file's "x = 1" is not).
_SETTINGS_FILE = re.compile(
    r"(?:\.(?:ini|cfg|conf|env|properties|toml|ya?ml)|(?:^|/)\.env(?:\.\w+)?)$", re.IGNORECASE
)
_SETTING = re.compile(r"^([A-Za-z_][\w.-]{0,48})\s*[=:]\s*(\S[^\n]{0,150})$")
_ECHO_SETTING = re.compile(
    r"\becho\s+['\"]?([A-Za-z_][\w.-]{0,48})=([^'\"\s]{1,150})['\"]?\s*>>?\s*(\S+)"
)
MAX_FILE_SETTINGS = 40  # settings shown by one `cat FILE`
MAX_VALUE_CHARS = 200
MAX_SUBJECT_CHARS = 80
FALLBACK_SUBJECT = "action"  # an empty action has no command to be the subject


@dataclass(frozen=True)
class _Draft:
    kind: StateKind
    subject: str
    attribute: str
    value: str


# --- exit codes --------------------------------------------------------------------------------
_EXIT_CODE = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>"
    r"|\b(?:exit|return)[ _-]?(?:code|status)\b[\"']?[ \t]*(?:[:=]|is|of)?[ \t]*(-?\d+)\b"
    r"|\bexited with (?:code |status )?(-?\d+)\b",
    re.IGNORECASE,
)

# --- errors ------------------------------------------------------------------------------------
# A cheap multi-line prefilter finds candidate lines; the precise rules run on those only.
_ERROR_CANDIDATE = re.compile(
    r"^[^\n]*(?:Error|Exception|DoesNotExist|Interrupt|error|ERROR|fatal|FATAL|FAIL|panic"
    r"|not found|No such file|Permission denied|does not exist|cannot access"
    r"|[Ee]xecution failed)[^\n]*$",
    re.M,
)
# "12:", "12<TAB>", "  12  x" and Claude Code's "12→" prefix a line of a code listing.
_LINE_NUMBERED = re.compile(r"^\s*\d+(?::|\t|\u2192| {2,}\S)")
_CODE_LINE = re.compile(
    r"^\s*(?:except|raise|catch|throw|throws|import|from|def|class|return|if|elif|assert|#|//)\b"
    r"|\b(?:except|raise|isinstance|throw new)\b[ (]"
)
_ERROR_CLASS_AT = re.compile(
    r"(?<![\w.])((?:[A-Za-z_]\w*\.){0,6}(?:[A-Z]\w*?(?:Error|Exception|Interrupt|Exit)"
    r"|\w*DoesNotExist))(?::\s|:?\s*$)"
)
_TEST_FAILURE = re.compile(r"^(?:FAILED|ERROR)\s+([^\s(]\S*)")
# The line that ends a Python traceback names the exception, whatever its class is called
# (django's ImproperlyConfigured, AppRegistryNotReady): the first unindented line after the
# frames of a "Traceback (most recent call last):" header.
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):[ \t\r]*$", re.M)
_TRACEBACK_END = re.compile(r"^((?:[A-Za-z_]\w*\.){0,8}[A-Z]\w*)(?::[ \t][^\n]*|:?[ \t\r]*)$")
_ERROR_PREFIX = re.compile(
    r"^(?:fatal|error|Error|ERROR|FATAL|panic)\s*(?:\[[^\]]*\])?\s*:\s*\S"  # git, npm, rustc
    r"|^E {2,}\S"  # pytest's failure detail lines
)
_ERROR_PHRASE = re.compile(
    r": (?:command not found|No such file or directory|Permission denied)"
    r"|\bcannot access\b|\bSQL compilation error\b|\bsyntax error\b|\bdoes not exist\b"
    # Spider-agent's whole report of a failed shell command.
    r"|^Command execution failed\b"
    # What scripts print when they catch one: "An error occurred: Requested setting ...".
    r"|^An? (?:unexpected )?(?:error|exception) (?:occurred|was raised)\b"
    # ... and what they print after their own context: "floatformat('0.00', 0) with error:
    # Requested setting ...", "case 3 raised exception: ..." (not a format string's "{e}").
    r"|\S\s+(?:with|raised|threw|gave|got|produced|returned) (?:an? )?(?:unexpected )?"
    r"(?:error|exception)s?: (?![{%\"'])\S"
)

# --- test summaries and HTTP status ------------------------------------------------------------
_PYTEST_SUMMARY = re.compile(
    r"^=+ (.*?\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|no tests ran)\b.*?)"
    r" =+[ \t\r]*$",
    re.M,
)
_UNITTEST_RESULT = re.compile(
    r"^Ran \d+ tests? in [\d.]+s[ \t\r]*\n(?:[ \t\r]*\n)?(OK|FAILED \([^)\n]*\))", re.M
)
_HTTP_STATUS = re.compile(r"\bHTTP/\d(?:\.\d)? (\d{3})\b")

# --- file edits ------------------------------------------------------------------------------
_TEE = re.compile(r"\btee\s+(?:-a\s+)?([^\s;&|<>'\"()]+)")
_CHANGES_FILES = "|".join(sorted(shell.FILE_COMMANDS - {"chmod"}))  # a mode is not content
_FILE_COMMANDS = re.compile(rf"(?:^|&&|;|\|\|)\s*({_CHANGES_FILES})\s+([^;&|<>]*)")
_JSON_PATH = re.compile(r"[\"']path[\"']\s*[:=]\s*[\"']([^\"'\s]+)[\"']")
_SHOWN_FILE = re.compile(r"^\[File: (\S+) \(\d+ lines total\)\]", re.M)
_NEW_STR = re.compile(r"<new_str>\n[ \t]*([^\s<][^\n\r]*)")
# Codex's apply_patch: every file of the patch is edited (pipelines/adapters/codex.py).
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (\S[^\n]*?)[ \t\r]*$", re.M)

# --- key/value fields --------------------------------------------------------------------------
# A key is one identifier, or up to three words ("Moves Left: 48", "Last Action: up").
_KV_LINE = re.compile(
    r"^[ \t]*(?:[-*][ \t]+)?([A-Za-z_](?:[\w.-]{0,47}\w)?(?: [A-Za-z][\w-]{0,19}){0,2})"
    r"[ \t]*(?:=|:[ \t])[ \t]*(\S[^\n]{0,150}?)[ \t\r]*,?[ \t\r]*$",
    re.M,
)
# A field whose value is a list or an object ('board': [[0, 2], [4, 0]]): the bracketed value.
_BRACKET_FIELD = re.compile(r"([\"'])([A-Za-z_][\w .-]{0,48})\1[ \t]*:[ \t]*(?=[\[{])")
MAX_BRACKET_VALUE = 300
# An item of a list that measures or places something: "- tree 6 steps to your south-east",
# "rule `is` 3 step to the left", "ball 2 step up". The name is the subject, the rest its value.
_ITEM_LINE = re.compile(
    r"^[ \t]*(?:[-*\u2022][ \t]+)?((?:[A-Za-z`'\"][\w`'\".-]*[ \t]+){0,3}?[A-Za-z`'\"][\w`'\".-]*)"
    r"[ \t]+(\d[^\n]{0,120}?)[ \t\r]*$",
    re.M,
)
MAX_ITEM_WORDS = 14
_JSON_FIELD = re.compile(
    r"\"([A-Za-z_][\w .-]{0,48})\"[ \t]*:[ \t]*(?:\"((?:[^\"\\\n]|\\.){1,200})\""
    r"|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)\b)"
)
_PY_FIELD = re.compile(
    r"'([A-Za-z_][\w .-]{0,48})'[ \t]*:[ \t]*(?:'((?:[^'\\\n]|\\.){1,200})'"
    r"|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|True|False|None)\b)"
)
# Line prefixes that look like "key: value" but are log labels, not reported values.
_LOG_LABELS = (
    "Traceback File Error ERROR error Warning WARNING warning Note NOTE note http https self "
    "return THOUGHT Exception fatal E Hint HINT DETAIL LINE Usage usage"
)
_KV_STOP = frozenset(_LOG_LABELS.split())
_CALL_IN_VALUE = re.compile(r"\w\(|^=")
_ERRORISH_KEY = re.compile(r"(?:Error|Exception|Warning|DoesNotExist)$")

# --- line diffs --------------------------------------------------------------------------------
_DIFF_MARK = re.compile(r"^(?:diff --git |@@ -\d|\+\+\+ |--- a/)", re.M)
_DIFF_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)|^diff --git a/\S+ b/(\S+)")
# Wrapper tags (<output>, <returncode>0</returncode>), bracketed tool notes ("[The command
# completed with exit code 0.]", "[File: x (3 lines total)]") and our truncation marker.
_BOILERPLATE = re.compile(r"^</?\w+>(?:[^<]*</\w+>)?$|^\[[^\]]*\]$|^\[\.\.\. trajgraph: ")
_ALNUM = re.compile(r"[A-Za-z0-9]")
_NUMBER_PREFIX = re.compile(r"^\d+(?::|\t|\u2192)")
_ELEMENT_ID = re.compile(r"^\[\d+\]")  # an accessibility tree's element id: [1483] link '...'
_HEADING = re.compile(r"^[A-Za-z][\w '()-]{0,40}:$")  # "Objects on the map:", "Board:"


class HeuristicExtractor(WindowByWindow):
    """Deterministic regex extractor; cheap enough to run on every turn of every trajectory."""

    name: str = "heuristic"

    def extract(self, window: Window) -> WindowExtraction:
        t = window.turn
        drafts = _state_drafts(window)
        states = [
            StateItem(
                key=f"t{t}.s{i}",
                subject=d.subject,
                attribute=d.attribute,
                value=d.value,
                kind=d.kind,
                turn=t,
                text=f"`{d.subject}` {d.attribute} = {d.value} (turn {t})",
            )
            for i, d in enumerate(drafts)
        ]
        objects = [ObjectItem(name=name, kind=kind, turns=[t]) for name, kind in _objects(window)]
        causes = [
            CauseItem(src=f"turn:{t}", dst=f"state:{s.key}", turns=[t], reason="action result")
            for s in states
        ]
        associations = [
            AssociationItem(a=f"state:{s.key}", b=f"object:{o.name}", turns=[t])
            for s in states
            for o in objects
            if occurs(o.name, s.value) or occurs(o.name, s.subject)
        ]
        return WindowExtraction(
            turn=t,
            states=states,
            objects=objects,
            causes=causes,
            associations=associations,
            extractor=self.name,
        )


# --- states ------------------------------------------------------------------------------------


def _state_drafts(window: Window) -> list[_Draft]:
    action, obs, prev = window.action, window.observation, window.prev_observation
    cmd = command_line(action, MAX_SUBJECT_CHARS) or FALLBACK_SUBJECT
    drafts: list[_Draft] = []
    exit_code = _exit_code(obs)
    if exit_code is not None:
        drafts.append(_Draft("exit_code", cmd, "exit_code", exit_code))
    errors = _errors(obs, cmd)
    drafts.extend(errors)
    drafts.extend(_statuses(obs, cmd))
    if not errors and exit_code in (None, "0"):
        drafts.extend(_file_changes(action, obs))  # a failed edit changed nothing
    shown = _shown_file(action)
    drafts.extend(_value_changes(prev, obs, shown))
    if not errors and exit_code in (None, "0"):
        drafts.extend(_settings_written(action))
    if not any(d.kind == "file_changed" for d in drafts):
        drafts.extend(_output(obs, cmd, action))
    if not errors:  # an error report is not a new version of the previous list
        drafts.extend(_line_changes(prev, obs, cmd))
    out: list[_Draft] = []
    seen: set[tuple[str, str, str]] = set()
    for d in drafts:
        ident = (d.subject, d.attribute, d.value)
        if d.value and ident not in seen:
            seen.add(ident)
            out.append(d)
            if len(out) >= MAX_STATES:
                break
    return out


def _exit_code(obs: str) -> str | None:
    for m in _EXIT_CODE.finditer(obs):
        start = obs.rfind("\n", 0, m.start()) + 1
        if _LINE_NUMBERED.match(obs[start : m.end()]):
            continue  # "return status" in a line of a code listing is source, not a result
        return next(g for g in m.groups() if g is not None)
    return None


def error_lines(observation: str) -> list[str]:
    """The error lines this extractor records for an observation, as stored (cut at
    MAX_VALUE_CHARS): what failure signatures are computed from (extractors/signatures.py)."""
    return [d.value for d in _errors(observation, FALLBACK_SUBJECT)]


def _errors(obs: str, cmd: str) -> list[_Draft]:
    found: list[_Draft] = []
    for _, is_end, line in sorted(_error_candidates(obs)):
        draft = _traceback_end_draft(line) if is_end else _error_draft(line, cmd)
        if draft is not None and draft not in found:
            found.append(draft)
    # The last errors matter most: a traceback ends with its exception, pytest with FAILED lines.
    return found[-MAX_ERRORS:]


def _error_candidates(obs: str) -> Iterator[tuple[int, bool, str]]:
    """(position, ends a traceback, stripped line) of the candidate error lines."""
    ends: dict[int, str] = {}
    for tb in _TRACEBACK.finditer(obs):
        end = _traceback_end(obs, tb.end())
        if end is not None:
            ends[end[0]] = end[1]
    for m in _ERROR_CANDIDATE.finditer(obs):
        if m.start() not in ends:
            yield m.start(), False, m.group().strip()
    for start, text in ends.items():
        yield start, True, text


def _traceback_end(obs: str, pos: int) -> tuple[int, str] | None:
    """The first unindented, non-empty line after the traceback header ending at ``pos``."""
    while pos < len(obs):
        end = obs.find("\n", pos + 1)
        end = len(obs) if end < 0 else end
        line = obs[pos:end].strip("\n\r")
        if line.strip() and not line[:1].isspace():
            return pos + (1 if obs[pos] == "\n" else 0), line.strip()
        pos = end
    return None


def _traceback_end_draft(line: str) -> _Draft | None:
    m = _TRACEBACK_END.match(line)
    if m is None:
        return None
    return _Draft("error", m.group(1), "error", truncate_words(line, MAX_VALUE_CHARS))


def _error_draft(line: str, cmd: str) -> _Draft | None:
    if not line or _LINE_NUMBERED.match(line):
        return None  # a line of a code listing (nl -ba, SWE-agent's open/edit views)
    value = truncate_words(line, MAX_VALUE_CHARS)
    test = _TEST_FAILURE.match(line)
    if test is not None:
        return _Draft("error", test.group(1), "error", value)
    pytest_e = line.startswith("E ")
    if _CODE_LINE.search(line) and not pytest_e:
        return None
    cls = _ERROR_CLASS_AT.search(line)
    if cls is not None:
        return _Draft("error", cls.group(1), "error", value)
    if _ERROR_PREFIX.match(line) or _ERROR_PHRASE.search(line):
        return _Draft("error", cmd, "error", value)
    return None


def _statuses(obs: str, cmd: str) -> Iterator[_Draft]:
    n = 0
    for m in _PYTEST_SUMMARY.finditer(obs):
        yield _Draft("status", cmd, "tests", m.group(1))
        n += 1
        if n >= MAX_STATUS:
            return
    for m in _UNITTEST_RESULT.finditer(obs):
        yield _Draft("status", cmd, "tests", m.group(1))
        n += 1
        if n >= MAX_STATUS:
            return
    http = _HTTP_STATUS.search(obs)
    if http is not None:
        yield _Draft("status", cmd, "http_status", http.group(1))


def _file_changes(action: str, obs: str) -> list[_Draft]:
    line, _ = command_line_span(action)
    words = line.split(None, 2)
    changes: list[tuple[str, str]] = []  # (path, value)
    if words and words[0] == "apply_patch":
        changes.extend((path, path) for path in _PATCH_FILE.findall(action))
    elif words and words[0] in shell.EDIT_TOOLS:
        path = words[1] if len(words) > 1 and shell.PATHISH.match(words[1]) else None
        if path is None:  # tool-call JSON: {"command": "create", "path": "/x.py", ...}
            arg = _JSON_PATH.search(action)
            path = arg.group(1) if arg else None
        if path is None or words[0] == "edit":
            shown = _SHOWN_FILE.search(obs)  # SWE-agent's "edit 12:14" edits the open file
            path = shown.group(1) if shown else path
        if path and not path[0].isdigit():
            new = _NEW_STR.search(action)
            changes.append((path, truncate_words(new.group(1).strip(), 120) if new else path))
    else:
        changes.extend(_shell_file_changes(line))
    out: list[_Draft] = []
    for path, value in changes:
        draft = _Draft("file_changed", path, "content", value)
        if draft not in out:
            out.append(draft)
    return out[:MAX_FILES]


def _shell_file_changes(line: str) -> Iterator[tuple[str, str]]:
    sed = shell.SED_IN_PLACE.search(line)
    if sed is not None:
        segment = line[sed.start() : shell.unquoted_separator(line, sed.end())]
        target = segment.split()[-1]
        if shell.PATHISH.match(target):
            subst = shell.SED_SUBST.search(segment)
            fragment = subst.group(3).strip() if subst else ""
            yield target, (fragment if _ALNUM.search(fragment) else target)
    for m in shell.WRITE_REDIRECT.finditer(line):
        target = m.group(1)
        if shell.PATHISH.match(target) and _ALNUM.search(target) and not target.startswith("/dev/"):
            yield target, target
    for m in _TEE.finditer(line):
        if shell.PATHISH.match(m.group(1)):
            yield m.group(1), m.group(1)
    for m in _FILE_COMMANDS.finditer(line):
        args = [a for a in m.group(2).split() if not a.startswith("-") and shell.PATHISH.match(a)]
        if m.group(1) in ("mv", "cp", "ln"):
            args = args[-1:]
        for a in args[:MAX_FILES]:
            yield a, a


def _fields(text: str) -> list[tuple[int, str, str]]:
    """(position, key, verbatim value) of key=value lines and JSON / Python-dict fields."""
    found: list[tuple[int, str, str]] = []
    if _is_code_listing(text) or _DIFF_MARK.search(text):
        return found  # "x = 1" in source code is not a reported value
    for m in _KV_LINE.finditer(text):
        key, value = m.group(1), m.group(2)
        if (
            key in _KV_STOP
            or key.split(" ", 1)[0] in _KV_STOP
            or _ERRORISH_KEY.search(key)
            or (" " in key and _EXIT_CODE.search(m.group(0)))  # an exit code has its own rule
            or value.endswith(("(", "[", "{", "\\", ",", ":"))
            or _CALL_IN_VALUE.search(value)
        ):
            continue
        found.append((m.start(1), key, value))
    for quote, rx in (('"', _JSON_FIELD), ("'", _PY_FIELD)):
        if quote not in text:
            continue
        for m in rx.finditer(text):
            value = m.group(2) if m.group(2) is not None else m.group(3)
            found.append((m.start(1), m.group(1), value))
    if "[" in text or "{" in text:
        for m in _BRACKET_FIELD.finditer(text):
            value = _bracketed(text, m.end())
            if value is not None:
                found.append((m.start(2), m.group(2), value))
    found += _items(text)
    found.sort()
    return found


def _bracketed(text: str, start: int) -> str | None:
    """The balanced [...] or {...} starting at ``start`` (on one line, short), else None."""
    depth = 0
    for i in range(start, min(len(text), start + MAX_BRACKET_VALUE)):
        c = text[i]
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        elif c == "\n":
            return None
    return None


def _items(text: str) -> list[tuple[int, str, str]]:
    """Items of a list (two or more such lines in a row) that measure or place a named thing:
    the name is the key, the measure its value."""
    out: list[tuple[int, str, str]] = []
    run: list[tuple[int, str, str]] = []
    last_end = -2
    for m in _ITEM_LINE.finditer(text):
        name, value = m.group(1).strip(), m.group(2)
        if len(m.group(0).split()) > MAX_ITEM_WORDS or name.split(" ", 1)[0] in _KV_STOP:
            continue
        if text.count("\n", last_end + 1, m.start()) > 1 if last_end >= 0 else False:
            out += run if len(run) >= 2 else []
            run = []
        run.append((m.start(1), name, value))
        last_end = m.end()
    out += run if len(run) >= 2 else []
    return out


def _first_values(fields: Iterable[tuple[int, str, str]]) -> dict[str, str]:
    first: dict[str, str] = {}
    for _, key, value in fields:
        first.setdefault(key, value)
    return first


def _is_code_listing(text: str) -> bool:
    lines = text.count("\n") + 1
    numbered = sum(1 for line in text.split("\n", 200)[:200] if _LINE_NUMBERED.match(line))
    return numbered * 3 >= min(lines, 200) or "[File: " in text


def _output(obs: str, cmd: str, action: str) -> list[_Draft]:
    """A short command output's last line ("Success! Lastmod: None"): the result of a run,
    which SUPERSEDES links to the previous run of the same command."""
    if not obs or obs.lstrip()[:1] in ("{", "["):
        return []  # JSON results are covered field by field
    lines = _content_lines(obs)
    if not 0 < len(lines) <= MAX_OUTPUT_LINES or cmd == FALLBACK_SUBJECT:
        return []
    commands = [n for n, k in find_identifiers(command_line(action), action=True) if k == "command"]
    if not commands or _is_code_listing(obs):
        return []  # a chat message answered by a user, or source code shown
    if any(c.split()[0].rsplit("/", 1)[-1] in shell.VIEWERS for c in commands):
        return []  # the last line of a file or a listing is not a result
    # The result is the last line, unless that is an enumeration (a menu of next actions,
    # a list of names) and an earlier line says what happened.
    said = [x for x in lines if x.count(",") <= MAX_RESULT_COMMAS]
    line = said[-1] if said else lines[-1]
    return [_Draft("status", cmd, "output", truncate_words(line, MAX_VALUE_CHARS))]


def _value_changes(prev: str, obs: str, shown: str | None = None) -> list[_Draft]:
    """Changed ``key=value`` / ``key: value`` / JSON fields. Shown by ``cat FILE``, they are
    FILE's settings (subject FILE, attribute key), so the same key in two files keeps two
    histories; otherwise the key is the subject."""
    if ":" not in obs and "=" not in obs:
        return []
    before = _first_values(_fields(prev)) if prev else {}
    out: list[_Draft] = []
    for key, value in _first_values(_fields(obs)).items():
        if before.get(key) != value:
            draft = (
                _Draft("value", shown, key, value)
                if shown
                else _Draft("value", key, "value", value)
            )
            out.append(draft)
            if len(out) >= (MAX_VALUES if not shown else MAX_FILE_SETTINGS):
                break
    return out


def _shown_file(action: str) -> str | None:
    """The one file a plain ``cat FILE`` (or head/less/more) prints, else None."""
    line, _ = command_line_span(action)
    words = line.split()
    if len(words) == 2 and words[0] in shell.FILE_VIEWERS and shell.PATHISH.match(words[1]):
        return words[1] if _SETTINGS_FILE.search(words[1]) else None
    return None


def _settings_written(action: str) -> Iterator[_Draft]:
    """``sed -i 's/^key=.*/key=value/' FILE`` and ``echo 'key=value' >> FILE`` set one
    setting of a settings file: the same (FILE, key) history that ``cat FILE`` starts."""
    line, _ = command_line_span(action)
    sed = shell.SED_IN_PLACE.search(line)
    if sed is not None:
        segment = line[sed.start() : shell.unquoted_separator(line, sed.end())]
        target = segment.split()[-1]
        subst = shell.SED_SUBST.search(segment)
        if subst and _SETTINGS_FILE.search(target):
            kv = _SETTING.match(subst.group(3).strip())
            if kv:
                yield _Draft("value", target, kv.group(1), kv.group(2))
        return
    echo = _ECHO_SETTING.search(line)
    if echo and _SETTINGS_FILE.search(echo.group(3)):
        yield _Draft("value", echo.group(3), echo.group(1), echo.group(2))


def _content_lines(text: str) -> list[str]:
    """Non-trivial lines, stripped and without a listing's line-number prefix (so that an
    edit that shifts the numbering does not make every line look new)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        numbered = _NUMBER_PREFIX.match(line)
        if numbered is not None:
            line = line[numbered.end() :].strip()
        if len(line) >= 2 and _ALNUM.search(line) and not _BOILERPLATE.match(line):
            out.append(line)
    return out


def _line_changes(prev: str, obs: str, cmd: str) -> list[_Draft]:
    if _DIFF_MARK.search(obs):
        return _diff_lines(obs, cmd)
    if not prev or not obs:
        return []
    cur, old = _content_lines(obs), _content_lines(prev)
    if len(cur) < 2 or len(old) < 2:
        return []
    if sum(map(len, cur)) > 120 * len(cur):
        return []  # long lines: prose or blobs, not a list
    cur_set, old_set = set(cur), set(old)
    shared = len(cur_set & old_set)
    # Only two views of the same list (ls before/after, a file shown twice) are comparable.
    if shared < 2 or shared * 2 < min(len(cur_set), len(old_set)):
        return []
    # Lines that are fields ("Moves Left: 48", "tree 6 steps east") are values of their key,
    # with a history of their own: not members of a list.
    fields = _field_lines(obs) | _field_lines(prev)
    added = _unique(x for x in cur if x not in old_set and x not in fields)[:MAX_LINES_EACH]
    removed = _unique(x for x in old if x not in cur_set and x not in fields)[:MAX_LINES_EACH]
    now, before = _line_subjects(obs, cmd), _line_subjects(prev, cmd)
    return [
        *(
            _Draft("line_added", now.get(v, cmd), "line", truncate_words(v, MAX_VALUE_CHARS))
            for v in added
        ),
        *(
            _Draft("line_removed", before.get(v, cmd), "line", truncate_words(v, MAX_VALUE_CHARS))
            for v in removed
        ),
    ]


def _field_lines(text: str) -> set[str]:
    """The (stripped) lines of ``text`` that hold a key=value field or a list item."""
    out: set[str] = set()
    for pos, _key, _value in _fields(text):
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        out.add(text[start : end if end >= 0 else len(text)].strip())
    return out


def _line_subjects(text: str, cmd: str) -> dict[str, str]:
    """What each content line belongs to: the element it describes (an accessibility tree's
    ``[1483] link '...'`` is element ``[1483]``), else the heading it sits under ("Objects on
    the map:", "Board:"), else the command that printed it."""
    out: dict[str, str] = {}
    heading = cmd
    for raw in text.splitlines():
        line = raw.strip()
        numbered = _NUMBER_PREFIX.match(line)
        if numbered is not None:
            line = line[numbered.end() :].strip()
        if not line:
            continue
        element = _ELEMENT_ID.match(line)
        if element is not None:
            out.setdefault(line, element.group(0))
        elif _HEADING.match(line):
            heading = line[:-1].strip()
        else:
            out.setdefault(line, heading)
    return out


def _diff_lines(obs: str, cmd: str) -> list[_Draft]:
    added: list[_Draft] = []
    removed: list[_Draft] = []
    subject = cmd
    for raw in obs.splitlines():
        header = _DIFF_FILE.match(raw)
        if header is not None:
            subject = header.group(1) or header.group(2)
            continue
        if raw.startswith(("+++", "---")) or raw[:1] not in ("+", "-"):
            continue
        content = raw[1:].strip()
        if len(content) < 2 or not _ALNUM.search(content):
            continue
        value = truncate_words(content, MAX_VALUE_CHARS)
        if raw[0] == "+" and len(added) < MAX_LINES_EACH:
            added.append(_Draft("line_added", subject, "line", value))
        elif raw[0] == "-" and len(removed) < MAX_LINES_EACH:
            removed.append(_Draft("line_removed", subject, "line", value))
    return [*added, *removed]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- objects -----------------------------------------------------------------------------------


def _objects(window: Window) -> list[tuple[str, ObjectKind]]:
    """Identifiers of the action and the current observation, capped by kind priority."""
    merged: dict[str, tuple[int, ObjectKind]] = {}
    order = 0
    # Argument names of a tool call ("command", "work_dir") are schema, not things acted on.
    action_ids = [(n, k) for n, k in find_identifiers(window.action, action=True) if k != "key"]
    for name, kind in [*action_ids, *find_identifiers(window.observation)]:
        old = merged.get(name)
        if old is None:
            merged[name] = (order, kind)
            order += 1
        elif KIND_PRIORITY[kind] < KIND_PRIORITY[old[1]]:
            merged[name] = (old[0], kind)
    ranked = sorted(merged.items(), key=lambda kv: (KIND_PRIORITY[kv[1][1]], kv[1][0]))
    kept = sorted(ranked[:MAX_OBJECTS], key=lambda kv: kv[1][0])
    return [(name, kind) for name, (_, kind) in kept]


def occurs(name: str, haystack: str) -> bool:
    """``name`` occurs in ``haystack`` and is not glued to surrounding word characters.

    "app" must not match inside "application"; names that start or end with punctuation
    (``#app``, ``/tmp/``) are only checked on their word-character side.
    """
    if not name:
        return False
    n = len(name)
    head_word = _is_word(name[0])
    tail_word = _is_word(name[-1])
    i = haystack.find(name)
    while i >= 0:
        j = i + n
        ok_before = not head_word or i == 0 or not _is_word(haystack[i - 1])
        ok_after = not tail_word or j == len(haystack) or not _is_word(haystack[j])
        if ok_before and ok_after:
            return True
        i = haystack.find(name, i + 1)
    return False


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"
