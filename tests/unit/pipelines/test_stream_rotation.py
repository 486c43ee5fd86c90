"""Log rotation under a followed stream (issue 31): by rename (``live.jsonl`` →
``live.jsonl.1``, the writer still appending to the old file until it reopens) and by copy
and truncate (the writer keeps its file; a copy keeps what it held). Every event written is
read exactly once, with no torn fragment dead-lettered.

Before, events appended between the last poll and a rename were never read (the reader
started on the new file), and a file truncated and written past the old offset within one
poll was read on from the old offset (its first events lost, a torn fragment
dead-lettered)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import ROTATION_STEPS
from tests.unit.pipelines.test_hostile_inputs import _State
from trajgraph.pipelines.stream_transforms import Line, TailSourceFn, _open_regular


class Follower:
    """A TailSourceFn and its state cells, polled by hand."""

    def __init__(self, source: Path) -> None:
        self.reader = TailSourceFn(str(source))
        self.cells = (_State(), _State(), _State())
        self.seen: Counter[int] = Counter()
        self.failures: list[dict[str, Any]] = []

    def poll(self) -> list[int]:
        got = []
        for out in self.reader.process(None, *self.cells):
            if isinstance(out, Line):
                got.append(json.loads(out.data)["idx"])
            else:
                self.failures.append(out.value)
        self.seen.update(got)
        return got


class Writer:
    """An agent appending events to ``live``, and the rotations a log tool does to it."""

    def __init__(self, live: Path, scheme: str) -> None:
        self.live = live
        self.scheme = scheme
        self.next = 0
        self.target = live  # the file (inode) the writer has open
        self.rotations = 0

    def rotated(self, n: int) -> Path:
        if self.scheme == "suffix":
            return self.live.with_name(f"{self.live.name}.{n}")  # not *.jsonl: not listed
        return self.live.with_name(f"{self.live.stem}-{n}.jsonl")  # listed too

    def append(self, count: int, pad: int = 0) -> None:
        with self.target.open("ab") as f:
            for _ in range(count):
                event = {"trajectory_id": "t", "idx": self.next, "action": "a" * pad}
                f.write(json.dumps(event).encode() + b"\n")
                self.next += 1

    def _shift(self) -> None:
        n = self.rotations
        while n >= 1:
            if self.rotated(n).exists():
                self.rotated(n).rename(self.rotated(n + 1))
                if self.target == self.rotated(n):
                    self.target = self.rotated(n + 1)
            n -= 1
        self.rotations += 1

    def rename_rotate(self) -> None:
        """logrotate's default: older copies shift, the live file becomes .1; the writer
        still holds it open (appends go there) until reopen()."""
        self._shift()
        was_target = self.target == self.live
        self.live.rename(self.rotated(1))
        if was_target:
            self.target = self.rotated(1)
        self.live.touch()

    def reopen(self) -> None:
        self.target = self.live
        self.live.touch()

    def copy_truncate(self) -> None:
        """logrotate's copytruncate: a copy keeps what was written, the file is emptied
        in place and the writer goes on writing to it."""
        self._shift()
        shutil.copyfile(self.live, self.rotated(1))
        os.truncate(self.live, 0)


@pytest.mark.parametrize("scheme", ["suffix", "listed"])
def test_events_appended_just_before_a_rename_are_read(tmp_path: Path, scheme: str) -> None:
    live = tmp_path / "live.jsonl"
    writer, follower = Writer(live, scheme), Follower(tmp_path)
    writer.append(3)
    assert follower.poll() == [0, 1, 2]
    writer.append(2)  # after the last poll, before the rotation
    writer.rename_rotate()
    writer.append(1)  # the writer has not reopened yet: into the rotated file
    writer.reopen()
    writer.append(2)
    assert sorted(follower.poll()) == [3, 4, 5, 6, 7]
    writer.rename_rotate()  # again: .1 shifts to .2, the live file becomes .1
    writer.append(1)
    writer.reopen()
    writer.append(1)
    assert sorted(follower.poll()) == [8, 9]
    assert follower.poll() == []
    assert set(follower.seen.values()) == {1} and follower.failures == []


@pytest.mark.parametrize("source", ["dir", "file"])
def test_a_file_truncated_and_written_past_the_offset_in_one_poll_is_read_whole(
    tmp_path: Path, source: str
) -> None:
    live = tmp_path / "live.jsonl"
    writer = Writer(live, "suffix")
    writer.append(3)
    follower = Follower(tmp_path if source == "dir" else live)
    assert follower.poll() == [0, 1, 2]
    writer.append(2)
    writer.copy_truncate()
    writer.append(6, pad=40)  # longer than the old offset before the next poll
    assert sorted(follower.poll()) == list(range(3, 11))
    assert follower.failures == []  # no torn fragment read from the old offset
    writer.append(1)
    assert follower.poll() == [11]
    assert set(follower.seen.values()) == {1}


def test_a_rotated_file_removed_before_its_rest_was_read_is_forgotten(tmp_path: Path) -> None:
    live = tmp_path / "live.jsonl"
    writer, follower = Writer(live, "suffix"), Follower(tmp_path)
    writer.append(2)
    follower.poll()
    writer.rename_rotate()
    writer.reopen()
    writer.append(1)
    assert follower.poll() == [2]
    writer.rotated(1).unlink()
    assert follower.poll() == []
    assert list(follower.cells[0].value) == [str(live)]  # nothing left of the rotated file


def _read_any(follower: Follower, live: Path) -> bool:
    """Whether the stream has read anything of the file now under ``live``, or it is empty."""
    tail = (follower.cells[0].value or {}).get(str(live))
    return live.stat().st_size == 0 or (tail is not None and tail.pos > 0)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=ROTATION_STEPS, scheme=st.sampled_from(["suffix", "listed"]))
def test_no_event_is_lost_or_read_twice_under_any_rotation(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]], scheme: str
) -> None:
    folder = tmp_path_factory.mktemp("rot")
    live = folder / "live.jsonl"
    writer, follower = Writer(live, scheme), Follower(folder)
    live.touch()
    follower.poll()  # the stream follows the file from when it appears
    rotated_since_poll = False

    def poll() -> None:
        nonlocal rotated_since_poll
        follower.poll()
        rotated_since_poll = False

    for op, n in steps:
        if op in ("rename", "copytruncate") and rotated_since_poll:
            poll()  # a log tool rotates at most once between two polls
        if op == "copytruncate" and scheme == "suffix" and not _read_any(follower, live):
            # A copy the stream does not follow, of a file it has read nothing of yet:
            # nothing tells it where those events went (a stream reads what it was shown).
            poll()
        if op == "append":
            writer.append(n, pad=n * 7)
        elif op == "rename":
            writer.rename_rotate()
            rotated_since_poll = True
        elif op == "copytruncate":
            writer.copy_truncate()
            rotated_since_poll = True
        elif op == "reopen":
            writer.reopen()
        else:
            poll()
    follower.poll()
    follower.poll()
    assert follower.failures == []
    assert sorted(follower.seen) == list(range(writer.next))  # written = read
    assert set(follower.seen.values()) <= {1}  # and each once


def test_devices_fifos_and_sockets_under_a_followed_folder_never_block_the_reader(
    tmp_path: Path,
) -> None:
    # The listing keeps regular files only; a name that becomes a FIFO after it was listed
    # is opened without blocking and refused (a blocked open stopped the whole stream).
    import socket
    import threading

    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"trajectory_id": "t", "idx": 0}) + "\n")
    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.jsonl"))
    follower = Follower(tmp_path)
    polled: list[list[int]] = []
    t = threading.Thread(target=lambda: polled.append(follower.poll()), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and polled == [[0]]
    # Listed as a regular file, then swapped for a FIFO before the next poll.
    good.unlink()
    os.mkfifo(good)
    follower.cells[0].value[str(good)].mtime_ns = -1  # as if it had changed
    t = threading.Thread(target=follower.poll, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive()
    server.close()
    for path in (good, tmp_path / "zero.jsonl"):  # what the reader's open does with them
        with pytest.raises(OSError, match="not a regular file"):
            _open_regular(str(path))
