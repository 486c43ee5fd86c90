"""The characters trajgraph never prints raw, and their escape.

A log is untrusted text: an ESC or CSI in it must not drive the terminal it is printed on, and
a bidirectional override must not reorder what a reader sees. The same class is the
``trajectory_id`` rule's "not" pattern in schemas/trajectory.schema.json (a unit test ties the
two): no id may hold these characters either.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, line and paragraph separators, bidi embeddings, overrides and
# isolates, lone surrogates.
UNPRINTABLE_PATTERN = (
    "[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069\\ud800-\\udfff]"
)
UNPRINTABLE = re.compile(UNPRINTABLE_PATTERN)


def escape_char(ch: str) -> str:
    return f"\\u{ord(ch):04x}"


def escape_unprintable(text: str, keep: str = "") -> str:
    """``text`` with every character of UNPRINTABLE (except those in ``keep``, e.g. "\\n\\t")
    written as ``\\u001b``, for terminals and logs. The escape is JSON's too: inside a JSON
    document these characters can only sit in strings, where the escape means the same."""
    return UNPRINTABLE.sub(
        lambda m: m.group() if m.group() in keep else escape_char(m.group()), text
    )
