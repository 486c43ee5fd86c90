"""A small in-memory Beam FileSystem under its own scheme, ``memtest://``: a stand-in for an
object store (gs://, s3://) that the tests can look into.

Beam finds FileSystem subclasses by their scheme once they are imported, so importing this
module registers it, in this process: runs whose workers are in this process (the
DirectRunner, Prism with LOOPBACK workers) write to it. Like an object store it has no real
folders (``mkdirs`` does nothing) and a file appears whole when its writer is closed.
"""

from __future__ import annotations

import io
import posixpath
import threading
from collections.abc import Iterator
from typing import Any

from apache_beam.io.filesystem import (
    BeamIOError,
    CompressedFile,
    CompressionTypes,
    FileMetadata,
    FileSystem,
)

SCHEME = "memtest"
PREFIX = f"{SCHEME}://"

_lock = threading.Lock()
_files: dict[str, bytes] = {}
_mtimes: dict[str, float] = {}
_clock = [0.0]


def files() -> dict[str, bytes]:
    """A copy of everything stored: path → content."""
    with _lock:
        return dict(_files)


def put(path: str, data: bytes) -> None:
    with _lock:
        _files[path] = data
        _clock[0] += 1
        _mtimes[path] = _clock[0]


def clear(prefix: str = PREFIX) -> None:
    with _lock:
        for path in [p for p in _files if p.startswith(prefix)]:
            del _files[path]
            _mtimes.pop(path, None)


class _Writer(io.BytesIO):
    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def close(self) -> None:
        if not self.closed:
            put(self._path, self.getvalue())
        super().close()


class MemoryFileSystem(FileSystem):
    """``memtest://bucket/a/b``: a dict of paths to bytes, shared by the whole process."""

    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath: str, *paths: str) -> str:
        if not basepath.startswith(PREFIX):
            raise ValueError(f"{basepath} is not a {PREFIX} path")
        path = basepath
        for p in paths:
            path = path.rstrip("/") + "/" + p.strip("/")
        return path

    def split(self, path: str) -> tuple[str, str]:
        if not path.startswith(PREFIX):
            raise ValueError(f"{path} is not a {PREFIX} path")
        head, tail = posixpath.split(path[len(PREFIX) :])
        return PREFIX + head, tail

    def mkdirs(self, path: str) -> None:
        pass  # no folders, as in an object store

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str) -> Iterator[FileMetadata]:
        for path, data in sorted(files().items()):
            if path.startswith(dir_or_prefix):
                yield FileMetadata(path, len(data), _mtimes.get(path, 0.0))

    def create(
        self,
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = CompressionTypes.AUTO,
    ) -> Any:
        writer = _Writer(path)
        compression = CompressionTypes.detect_compression_type(path)
        if compression_type != CompressionTypes.AUTO:
            compression = compression_type
        if compression == CompressionTypes.UNCOMPRESSED:
            return writer
        return CompressedFile(writer, compression)

    def open(
        self,
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = CompressionTypes.AUTO,
    ) -> Any:
        with _lock:
            if path not in _files:
                raise BeamIOError(f"{path} does not exist", {path: FileNotFoundError(path)})
            reader = io.BytesIO(_files[path])
        compression = CompressionTypes.detect_compression_type(path)
        if compression_type != CompressionTypes.AUTO:
            compression = compression_type
        if compression == CompressionTypes.UNCOMPRESSED:
            return reader
        return CompressedFile(reader, compression)

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        for src, dst in zip(source_file_names, destination_file_names, strict=True):
            with _lock:
                data = _files[src]
            put(dst, data)

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        self.copy(source_file_names, destination_file_names)
        self.delete(source_file_names)

    def exists(self, path: str) -> bool:
        with _lock:
            return path in _files or any(p.startswith(path.rstrip("/") + "/") for p in _files)

    def size(self, path: str) -> int:
        with _lock:
            return len(_files[path])

    def last_updated(self, path: str) -> float:
        with _lock:
            return _mtimes[path]

    def checksum(self, path: str) -> str:
        with _lock:
            return str(hash(_files[path]))

    def metadata(self, path: str) -> FileMetadata:
        with _lock:
            return FileMetadata(path, len(_files[path]), _mtimes[path])

    def delete(self, paths: list[str]) -> None:
        """Files, or every file under a prefix (Beam deletes its temporary "folders")."""
        with _lock:
            for path in paths:
                under = path.rstrip("/") + "/"
                doomed = [p for p in _files if p == path or p.startswith(under)]
                if not doomed:
                    raise BeamIOError("delete failed", {path: FileNotFoundError(path)})
                for p in doomed:
                    del _files[p]
                    _mtimes.pop(p, None)
