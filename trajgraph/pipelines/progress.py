"""Live progress for in-process runs.

Beam metrics are only readable when a run ends; for the progress bar the DoFns also bump these
process-local counters. On a remote runner they stay at zero and only the summary counts.
"""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counts: Counter[str] = Counter()


def bump(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] += n


def snapshot() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    with _lock:
        _counts.clear()
