"""Failure signatures: an error line with its run-specific parts removed.

The same failure in two runs (other files, other line numbers, another setting or table name,
another object address) gets the same signature; different failures do not. Signatures are
what trajgraph's cross-run memory groups by (graph/rows.py links every error state to its
``Signature`` node; queries/lessons/ reads them).

Normalisation, version ``SIGNATURE_VERSION`` (change the version when a rule changes: the
version is part of the node's uid, so signatures of two versions never mix):

1. Wrapper prefixes that scripts and test runners print around an error are dropped
   (``E   `` of pytest, ``An error occurred:``, ``Caught expected exception:``, ``Error:``),
   and so is a script's own context before the error it caught (``floatformat('0.00', 0)
   with error: Requested setting X, …``, ``case 3 raised exception: …``), when what follows
   the marker still says enough (rule 4): other runs share the error, not the script's
   wrapper. ``wrapper`` returns that context, which the lessons keep beside the match.
2. The exception class, when the line starts with one (``django.core.exceptions.
   ImproperlyConfigured: …``) or names one (``Subwidget 0 raised KeyError: 'id'``), is cut
   to its last component and split from the message.
3. In the message: object reprs (``<module 'x'>``, ``<Toy object at 0x7f…>``) become
   ``<obj>``; quoted values ``<q>``; the slots of known templates (``Requested setting X``,
   ``no such table: X``, ``No module named X`` …) ``<name>``; paths ``<path>``; addresses
   ``<addr>``; long hex ids and UUIDs ``<id>``; ALL_CAPS_SETTING names ``<NAME>``; numbers
   and ranges ``<n>`` (``Errno 2`` and ``os error 13`` are kept: they name the failure).
4. The signature is the message alone when it still says enough (two words of three letters
   or more), so ``AttributeError: 'list' object has no attribute 'x'`` and a script's
   ``Error: 'list' object has no attribute 'x'`` match; otherwise ``Class: message``
   (``KeyError: <q>``, ``AssertionError: <n> != <n>``).
5. Whitespace is collapsed and the result cut at ``MAX_CHARS`` on a word boundary, so that a
   line the extractor truncated and its full text give the same signature.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from trajgraph.extractors.identifiers import truncate_words

SIGNATURE_VERSION = 2  # 2: a script's context before a caught error is dropped (rule 1)
MAX_CHARS = 96  # the extractor cuts lines at 200 characters; class names take up to ~50
MAX_LINE_CHARS = 2000  # of one input line: error lines longer than this are blobs

# 1. prefixes around the error proper
_PREFIX = re.compile(
    r"^(?:"
    r"E {2,}"  # pytest's failure detail lines
    r"|(?:An? )?(?:unexpected |expected )?(?:[Ee]rror|[Ee]xception)"
    r"(?: (?:occurred|was raised|raised|caught))?(?: for [^:\n]{1,60})?: ?"
    r"|Caught (?:an? )?(?:unexpected |expected )?(?:[Ee]rror|[Ee]xception)?"
    r"(?: for [^:\n]{1,60})?:? ?(?=\S)"
    r"|Got (?:an? )?(?:unexpected |expected )?(?:[Ee]rror|[Ee]xception): ?"
    r")"
)
# 1b. a script's context before the error it caught, and the marker that ends it: "… with
# error: ", "… raised an exception: ", "… failed with ValueError: " is rule 2's inside class.
_INNER_MARKER = re.compile(
    r"(?<=\S)\s+(?:with|raised|threw|gave|got|produced|returned) (?:an? )?(?:unexpected )?"
    r"(?:error|exception)s?:\s+(?=\S)",
    re.IGNORECASE,
)
_MODULE_PATH_END = re.compile(r"(?:[A-Za-z_]\w*\.)+$")  # django.core.exceptions. before a class
# 2. the exception class: a dotted name whose last part is CamelCase (not ERROR, FAILED)
_CLASS_AT_START = re.compile(r"^((?:[A-Za-z_]\w*\.){0,8}([A-Z][a-z0-9]\w*))(?::\s*|\s*$)")
_CLASS_INSIDE = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*\.){0,8}([A-Z]\w*(?:Error|Exception|Warning|DoesNotExist)):\s+"
)

# 3. run-specific parts of the message
_REPR = re.compile(r"<[^<>\n]*>")
_QUOTED = re.compile(
    r"""(?<![\w\\])'(?:[^'\\\n]|\\.)*'"""  # 'x' (not the apostrophe of can't)
    r'''|"(?:[^"\\\n]|\\.)*"'''
    r"|`[^`'\n]*[`']"  # `x` and `x' (sed, older GNU tools)
    r"|‘[^’\n]*’|“[^”\n]*”"
)
# Unquoted slots of messages that are templates: the name differs per run, the failure not.
_TEMPLATES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\b(Requested setting) [A-Za-z_][\w.]*", r"\1 <name>"),
        (r"\b(No module named) [\w.]+", r"\1 <name>"),
        (r"\b(no such (?:table|column|index|function)): [\w.$]+", r"\1: <name>"),
        (r"\b(table|index) [\w.$]+ (already exists)", r"\1 <name> \2"),
        (r"\b(has no column named) [\w.$]+", r"\1 <name>"),
        (r"\b((?:UNIQUE|NOT NULL|CHECK|FOREIGN KEY) constraint failed): .*", r"\1: <names>"),
        (r"\b(Choices are): .*", r"\1: <names>"),
        (r"\b(Model class) [\w.]+ (doesn't declare)", r"\1 <name> \2"),
        (r"\b(Migration) [\w.]+ (in app) [\w.]+", r"\1 <name> \2 <name>"),
        (r"\b(The model) \w+ (is already registered)", r"\1 <name> \2"),
        (r"^(?:/(?:usr/)?bin/)?(bash|sh|zsh|dash):", r"\1:"),
    )
)
_ERRNO = re.compile(r"\b(Errno|os error|errno) (\d+)")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{12,}\b")
_PATH = re.compile(
    r"(?<![\w<])(?:~|\.{1,2})?(?:/[\w.@+-]+)+/?"  # /abs/path, ./rel, ~/x
    r"|(?<![\w/<.-])[\w.@+-]+(?:/[\w.@+-]+)+/?"  # rel/path
    r"|(?<![\w/<.-])[\w-]+(?:\.[\w-]+)*\.(?:py|pyc|pyi|js|ts|json|ya?ml|toml|ini|cfg|txt|md"
    r"|rst|html|sql|sh|c|h|cpp|go|rs|java|rb|php|lock|log|csv|db|sqlite3?)\b"
)
_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
_RANGE = re.compile(r"<n>(?:\s*[-–,]\s*<n>)+")
_ERRNO_MARK = "ERRNOMARK"  # glued to the number, so the number rule leaves it alone
_WORD = re.compile(r"[A-Za-z][A-Za-z_]{2,}")
_SPACES = re.compile(r"\s+")


def signature(line: str) -> str | None:
    """The signature of one error line (see the module docstring), or None when nothing
    specific is left (an empty line, a bare placeholder)."""
    line = _SPACES.sub(" ", (line or "")[:MAX_LINE_CHARS]).strip()
    if not line:
        return None
    cls, message = _split_class(_core(line)[1])
    message = normalize_message(message)
    if _specific(message):
        text = message
    elif cls:
        text = f"{cls}: {message}" if message else cls
    else:
        return None
    return truncate_words(text, MAX_CHARS).rstrip(" .:,;")


def quoted_values(line: str) -> tuple[str, ...]:
    """The quoted values a signature leaves out (``'psycopg2'`` of ``No module named
    'psycopg2'``): two errors with one signature and the same values are the same failure
    in detail, which ranks their lessons first. A script's wrapper (rule 1) is not part of
    the failure, so its values are not either."""
    _, message = _split_class(_core(line)[1])
    return tuple(m.group()[1:-1] for m in _QUOTED.finditer(message))


def wrapper(line: str) -> str:
    """The context a script printed before the error it caught (rule 1), which the
    signature leaves out: ``floatformat('0.00', 0)`` of ``floatformat('0.00', 0) with
    error: Requested setting …``. Empty when the line has none."""
    return _core(line)[0]


def _core(line: str) -> tuple[str, str]:
    """(wrapper, the error proper) of one line, rule 1: prefixes dropped, and a script's
    context before an inner marker when the line has no exception class of its own and
    what follows the marker is specific enough to sign alone."""
    line = _PREFIX.sub("", _SPACES.sub(" ", (line or "")[:MAX_LINE_CHARS]).strip(), count=1)
    line = line.strip()
    cls, message = _split_class(line)
    if cls:  # the class says where the error proper starts (rule 2)
        at = line.rfind(cls, 0, len(line) - len(message))
        return _MODULE_PATH_END.sub("", line[: max(at, 0)]).rstrip(" :-"), line
    for m in _INNER_MARKER.finditer(line):
        inner = _PREFIX.sub("", line[m.end() :], count=1).strip()
        inner_cls, inner_message = _split_class(inner)
        if inner_cls or _specific(normalize_message(inner_message)):
            return line[: m.start()].strip(), inner
    return "", line


def _split_class(line: str) -> tuple[str, str]:
    m = _CLASS_AT_START.match(line)
    if m is not None and (m.group(0).rstrip().endswith(":") or m.end() == len(line)):
        return m.group(2), line[m.end() :]
    inside = _CLASS_INSIDE.search(line)
    if inside is not None:
        return inside.group(1), line[inside.end() :]
    return "", line


def normalize_message(message: str) -> str:
    """Step 3 of the module docstring on one message."""
    text = message
    previous = None
    while previous != text:  # nested reprs: <SimpleLazyObject: <User: x>>
        previous, text = text, _REPR.sub("\x01", text)
    text = _QUOTED.sub("<q>", text)
    text = text.replace("\x01", "<obj>")
    for rx, repl in _TEMPLATES:
        text = rx.sub(repl, text)
    text = _ERRNO.sub(lambda m: f"{m.group(1)} {_ERRNO_MARK}{m.group(2)}", text)
    text = _ADDRESS.sub("<addr>", text)
    text = _UUID.sub("<id>", text)
    text = _HEX_ID.sub("<id>", text)
    text = _PATH.sub(lambda m: m.group() if len(m.group()) < 4 else "<path>", text)
    text = _CONSTANT.sub("<NAME>", text)
    text = _NUMBER.sub("<n>", text)
    text = _RANGE.sub("<n>", text)
    text = text.replace(_ERRNO_MARK, "")
    return _SPACES.sub(" ", text).strip().rstrip(" .:,;")


def _specific(message: str) -> bool:
    words = _WORD.findall(message.replace("<name>", "").replace("<names>", ""))
    return len([w for w in words if w not in _PLACEHOLDER_WORDS]) >= 2


_PLACEHOLDER_WORDS = frozenset({"obj", "path", "addr", "NAME", "names", "name"})


# The placeholders of values a user may type with or without quotes; the others (<n>, <path>,
# <obj> ...) are normalised the same way in the asked text, so they must match themselves.
_ANY_VALUE = re.compile(r"<(?:q|name|names)>")
_TOKEN = re.compile(r"<(?:q|name|names)>|\w+|[^\w\s]")
MIN_PREFIX_CHARS = 24  # of its own a known signature needs to match a shorter asked one
# Words one value may stand for: a value the logs quoted, typed bare, can be a phrase; a value
# typed quoted stands for what the logs printed bare, a name (fewer, or an asked value at the
# end would swallow a known signature's whole tail and make any start of it a whole match).
MAX_BARE_VALUE_TOKENS = 16
MAX_QUOTED_VALUE_TOKENS = 8
MAX_ALIGNMENTS = 200  # candidates aligned word by word for one asked signature


def closest_signature(asked: str, known: Iterable[str]) -> str | None:
    """The known signature an asked one matches when a value (``<q>``, ``<name>``) on either
    side may stand for words on the other: a failure typed by hand without its quotes (``No
    module named psycopg2`` for ``No module named 'psycopg2'``, ``list object has no
    attribute x``) or quoted where the logs did not quote it. Words match regardless of
    case. The asked signature may stop early (a message pasted in part) when at least
    ``MIN_PREFIX_CHARS`` of the known one's own characters match. The matched characters
    must make up half of the asked signature's own, so ``KeyError: <q>`` is not the closest
    signature of every ``KeyError``. Of several, the one with most matched characters wins,
    then a whole match, then the shorter."""
    a = _tokens(asked)
    if not a:
        return None
    literal = [t for t in a if not _is_value(t)]
    need = max(sum(len(t) for t in literal) / 2, 1)
    # Branch and bound: the characters of the asked words a candidate has at all bound what
    # an alignment can match, so candidates are aligned best bound first, and only while
    # their bound can still beat (or tie) the best match; at most MAX_ALIGNMENTS of them.
    bounded: list[tuple[int, int, str, tuple[str, ...]]] = []
    for candidate in known:
        if candidate == asked:
            return candidate
        k = _tokens(candidate)
        if not k or (a[0] != k[0] and not (_is_value(a[0]) or _is_value(k[0]))):
            continue  # the alignment starts at both first tokens: most candidates end here
        words = set(k)
        bound = sum(len(t) for t in literal if t in words)
        if bound >= need:
            bounded.append((-bound, len(candidate), candidate, k))
    bounded.sort()
    best: tuple[int, int, int, str] | None = None  # min wins
    for n, (neg_bound, size, candidate, k) in enumerate(bounded):
        if n == MAX_ALIGNMENTS or (best is not None and -neg_bound < -best[0]):
            break
        matched, whole = _match_tokens(a, k)
        if matched < need or (not whole and matched < MIN_PREFIX_CHARS):
            continue
        key = (-matched, 0 if whole else 1, size, candidate)
        best = key if best is None else min(best, key)
    return None if best is None else best[3]


@functools.lru_cache(maxsize=8192)  # a tenant's signatures, asked again per question
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(t if _is_value(t) else t.lower() for t in _TOKEN.findall(text))


def _is_value(token: str) -> bool:
    return token in ("<q>", "<name>", "<names>")


def _match_tokens(a: Sequence[str], k: Sequence[str]) -> tuple[int, bool]:
    """(characters of the literal tokens matched, whether ``k`` was matched whole) of the
    best alignment of all of ``a`` with ``k`` or a prefix of it; (-1, False) when there is
    none. A value of ``k`` stands for one to ``MAX_BARE_VALUE_TOKENS`` tokens of ``a``, a
    value of ``a`` for one to ``MAX_QUOTED_VALUE_TOKENS`` of ``k``."""
    memo: dict[tuple[int, int], tuple[int, bool]] = {}

    def best(i: int, j: int) -> tuple[int, bool]:
        if i == len(a):
            return (0, j == len(k))
        if j == len(k):
            return (-1, False)
        if (i, j) not in memo:
            out = (-1, False)
            if _is_value(k[j]):
                for m in range(1, min(MAX_BARE_VALUE_TOKENS, len(a) - i) + 1):
                    out = max(out, best(i + m, j + 1))
            if _is_value(a[i]):
                for m in range(1, min(MAX_QUOTED_VALUE_TOKENS, len(k) - j) + 1):
                    out = max(out, best(i + 1, j + m))
            elif a[i] == k[j]:
                sub = best(i + 1, j + 1)
                if sub[0] >= 0:
                    out = max(out, (sub[0] + len(a[i]), sub[1]))
            memo[i, j] = out
        return memo[i, j]

    return best(0, 0)


def typed_values(line: str, known: str) -> tuple[str, ...]:
    """The values an error line gives for the value placeholders of the known signature it
    matched by ``closest_signature`` (``psycopg2`` of ``No module named psycopg2`` for ``No
    module named <q>``), quotes removed: what ``quoted_values`` would have read had the
    line been quoted as the logs quote it. Empty when the line does not follow the
    signature word for word (a signature cut at ``MAX_CHARS``, another placeholder)."""
    cls, message = _split_class(_core(line)[1])
    message = message.strip().rstrip(" .:,;")
    pattern = "(.+?)".join(re.escape(p) for p in _ANY_VALUE.split(known))
    for text in (message, f"{cls}: {message}"):  # signed as the message, or Class: message
        m = re.fullmatch(pattern, text, flags=re.IGNORECASE)
        if m is not None:
            return tuple(_unquote(v.strip()) for v in m.groups())
    return ()


def _unquote(value: str) -> str:
    if len(value) >= 2 and _QUOTED.fullmatch(value) is not None:
        return value[1:-1]
    return value
