"""A session file that grows while a stream follows it, as an agent's transcript does: it
starts cut in the middle of a line, and the rest arrives in chunks from another thread; and
the stream that follows it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.ingesting import NO_MODELS
from trajgraph.core.settings import Settings
from trajgraph.jobs import stream


@contextmanager
def growing(
    target: Path, lines: list[bytes], *, first: int, cut: int, chunk: int, pause_s: float
) -> Iterator[None]:
    """``target`` holds ``lines[:first]`` and the first ``cut`` bytes of the next line (a torn
    line); 4 s into the block the rest of that line arrives, then ``chunk`` lines every
    ``pause_s`` seconds. Leaving the block waits for the last write."""
    target.write_bytes(b"".join(lines[:first]) + lines[first][:cut])

    def grow() -> None:
        time.sleep(4.0)
        with target.open("ab") as f:
            f.write(lines[first][cut:])
            f.flush()
            for start in range(first + 1, len(lines), chunk):
                f.write(b"".join(lines[start : start + chunk]))
                f.flush()
                time.sleep(pause_s)

    writer = threading.Thread(target=grow)
    writer.start()
    try:
        yield
    finally:
        writer.join()


def follow(
    watch: Path, tenant: str, settings: Settings, dead_letter: Path, duration_s: int
) -> None:
    """`trajgraph stream` over ``watch`` for ``duration_s`` seconds into ``tenant``, without
    models; nothing may go to the dead letters."""
    stream.run(
        [
            str(watch),
            *("--tenant", tenant, "--duration", str(duration_s), "--poll", "0.3"),
            *NO_MODELS,
            *("--dead-letter", str(dead_letter)),
        ],
        settings=settings,
    )
    assert not (dead_letter / "dead-letter.jsonl").exists()
