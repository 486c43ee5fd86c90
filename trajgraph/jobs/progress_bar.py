"""The progress bar of ``trajgraph ingest`` on a terminal.

Beam's metrics are only readable when a run ends, so the bar polls the process-local
counters the DoFns also bump (pipelines/progress.py). On a remote runner they stay at zero.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType

from trajgraph.pipelines import progress


class ProgressBar:
    """A tqdm bar (files read) on stderr, redrawn four times a second while in the ``with``."""

    def __init__(self, files: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=files, unit="file", file=sys.stderr, desc="ingest", leave=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProgressBar:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._draw()
        self._bar.close()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self._draw()

    def _draw(self) -> None:
        c = progress.snapshot()
        self._bar.n = min(c.get("files", 0), self._bar.total or 0)
        self._bar.set_postfix_str(
            f"trajectories {c.get('trajectories_written', 0)}, turns {c.get('turns', 0)}, "
            f"rows {c.get('rows_written', 0)}, dead-lettered {c.get('dead_lettered', 0)}",
            refresh=True,
        )
