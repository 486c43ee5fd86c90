"""SIGTERM and SIGINT end an ingest or a stream with its summary (exit 143 / 130), without
a traceback.

Beam runs bundles on the main thread and re-raises what a DoFn raised as a RuntimeError, so
the exception that reaches the job cannot tell which signal stopped it: the handler records
the signal in :data:`received` before raising.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

# The signals that stopped the current run, in order.
received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (the handler raises this, so the run ends like on Ctrl-C)."""


def _stop(signum: int, frame: Any) -> None:
    received.append(signum)
    # The run ends here, and its summary says why: Beam would also log the interrupted
    # bundle's traceback as an ERROR (and the driver what the interrupted call left).
    logging.disable(logging.CRITICAL)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _drain_first(drain: Callable[[], bool]) -> Callable[[int, Any], None]:
    def handler(signum: int, frame: Any) -> None:
        if received or not drain():  # a second signal does not wait for the drain
            _stop(signum, frame)
        received.append(signum)

    return handler


@contextlib.contextmanager
def ending_the_run(drain: Callable[[], bool] | None = None) -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated`, SIGINT KeyboardInterrupt (main thread only;
    elsewhere signals cannot be handled and nothing changes). With ``drain``, the first
    signal calls it instead, and raises only when it returns False: True means the run ends
    soon by itself, finishing what it holds. A second signal raises. The old handlers come
    back after."""
    received.clear()
    previous: dict[int, Any] = {}
    handler = _stop if drain is None else _drain_first(drain)
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            logging.disable(logging.NOTSET)
