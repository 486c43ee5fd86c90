"""Cross-run memory: other runs that hit the same failure, what got them past it and what
did not help (docs/lessons.md). ``lessons`` answers one question within a token budget;
``signatures_of_text`` signs an error text as ingest signs error states."""

from trajgraph.queries.lessons.lookup import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_ERROR_CHARS,
    MIN_BUDGET,
    Lessons,
    SignatureLessons,
    lessons,
    signatures_of_text,
)

__all__ = [
    "DEFAULT_BUDGET",
    "MAX_BUDGET",
    "MAX_ERROR_CHARS",
    "MIN_BUDGET",
    "Lessons",
    "SignatureLessons",
    "lessons",
    "signatures_of_text",
]
