"""The files a run writes beside the graph, on whatever filesystem Beam can reach.

Dead letters, the windows to retry and the metrics file are local paths by default, but a
run's workers may be on other machines (Flink, Spark, Dataflow): then those files must go
where both the workers and the launcher reach them, e.g. ``gs://``, ``s3://`` or ``hdfs://``
(with apache-beam's ``gcp``, ``aws`` or ``hadoop`` extras). The workers write them with
Beam's sinks, and the job creates, reads and removes them here, through the same
``FileSystems``; a local path behaves as before (folders created and removed, files written
atomically).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

LOCAL_SCHEMES = (None, "file")


def is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) in LOCAL_SCHEMES


def join(base: str, *parts: str) -> str:
    """``base/part...`` in the filesystem's own syntax (a local path keeps its OS form)."""
    return FileSystems.join(str(base), *parts)


def make_dirs(path: str) -> None:
    """The folder and its parents; nothing where folders are only name prefixes (object
    stores) or already exist."""
    if is_local(path):
        Path(path).mkdir(parents=True, exist_ok=True)
        return
    with contextlib.suppress(OSError):  # BeamIOError: exists, or the store has no folders
        FileSystems.mkdirs(path)


def exists(path: str) -> bool:
    if is_local(path):
        return Path(path).exists()
    return bool(FileSystems.exists(path))


def read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist."""
    if is_local(path):
        try:
            return Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        data: bytes = f.read()
    return data.decode("utf-8")


def write_bytes(path: str, data: bytes) -> None:
    """A new file with ``data`` (object stores publish it whole when it is closed; local
    callers that need atomicity write a temporary file and rename it themselves)."""
    if is_local(path):
        Path(path).write_bytes(data)
        return
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)


def delete(path: str) -> None:
    """Remove a file; nothing if it is not there."""
    if is_local(path):
        Path(path).unlink(missing_ok=True)
    elif FileSystems.exists(path):
        FileSystems.delete([path])


def remove_empty_dir(path: str) -> None:
    """Remove a local folder that ended up empty (object stores have no folders to remove)."""
    if is_local(path):
        with contextlib.suppress(OSError):
            Path(path).rmdir()
