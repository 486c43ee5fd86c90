"""The ingest manifest: which input files a nightly ``trajgraph ingest --manifest PATH`` has
already put into the graph, so the next run reads only new, changed or failed ones.

One JSON file holds one section ("scope") per tenant and id prefix: a manifest used with
another tenant or prefix finds nothing of its own there and ingests everything, without
touching the other scopes. Per file it records the path, size, mtime, content sha256, the
configuration that ingested it (format, extractor fingerprint, embedder, token budget) and
the outcome of the last run that read it:

* ``done``: every record reached the graph.
* ``failed``: records of the file were dead-lettered: read again next run.
* ``degraded``: the LLM server could not answer for some windows, the heuristic stood in
  (or embedding failed): read again next run, when the server may be back.

A file counts as unchanged when size and mtime match (the fast path) or, failing that, when
its sha256 does; an unchanged ``done`` file under the same configuration is skipped. The
manifest is written atomically (temp file, fsync, ``os.replace``) and only after the graph
write succeeded: a run that crashes leaves the previous manifest, so nothing is marked done
that is not in the graph. Entries of files that no longer exist are reported once
(``missing``) and dropped; the graph keeps their trajectories (``trajgraph delete --source``).

No Beam here: the manifest is planned before the pipeline and recorded after it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trajgraph.core.errors import ConfigError, TrajgraphError

VERSION = 1
DONE, FAILED, DEGRADED = "done", "failed", "degraded"
STATUSES = (DONE, FAILED, DEGRADED)
_CHUNK = 1 << 20


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- files -----------------------------------------------------------------------------------


def _is_remote(path: str) -> bool:
    return "://" in path


def file_key(path: str) -> str:
    """How the manifest names a file: the absolute path for local files, the URL otherwise,
    so a job started from another working directory finds the same entries."""
    return path if _is_remote(path) else os.path.abspath(path)


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime_ns: int


def stat_file(path: str) -> FileStat | None:
    """Size and modification time, or None when the file does not exist."""
    if not _is_remote(path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return FileStat(st.st_size, st.st_mtime_ns)
    from apache_beam.io.filesystems import FileSystems

    try:
        found = FileSystems.match([path])[0].metadata_list
    except Exception:  # BeamIOError: no such object
        return None
    if not found:
        return None
    meta = found[0]
    return FileStat(int(meta.size_in_bytes), int((meta.last_updated_in_seconds or 0) * 1e9))


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    if _is_remote(path):
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    else:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def config_fingerprint(**parts: Any) -> str:
    """A short hash of everything besides the file that decides what the graph gets from it."""
    body = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


# -- atomic JSON files -----------------------------------------------------------------------


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON so readers see the old file or the new one, never a torn one: a temp file
    in the same directory, fsync, ``os.replace``, then fsync of the directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# -- plan and record -------------------------------------------------------------------------


@dataclass
class PlannedFile:
    source: str  # the path as the pipeline reads it (and the graph's Trajectory.source)
    key: str
    stat: FileStat
    sha256: str
    reason: str  # new | changed | config | retry-failed | retry-degraded | rescan


@dataclass
class Plan:
    todo: list[PlannedFile] = field(default_factory=list)
    skipped: list[PlannedFile] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)  # dropped entries, reported

    @property
    def sources(self) -> list[str]:
        return [f.source for f in self.todo]


class Manifest:
    """Load with ``Manifest.load``, ``plan`` before the pipeline, ``record`` and ``save`` after
    it succeeded. ``lock`` keeps two jobs from using one manifest at once."""

    def __init__(self, path: str | Path, data: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.data: dict[str, Any] = data or {"version": VERSION, "scopes": []}

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(p)
        except OSError as e:
            raise ConfigError(f"cannot read the manifest {p}: {e}") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"the manifest {p} is not valid JSON ({e}); trajgraph writes it atomically, so "
                "it was changed by hand: fix it, or delete it to ingest every file again"
            ) from e
        if not isinstance(data, dict) or not isinstance(data.get("scopes"), list):
            raise ConfigError(f"the manifest {p} is not a trajgraph ingest manifest")
        if data.get("version") != VERSION:
            raise ConfigError(
                f"the manifest {p} has version {data.get('version')!r}; this trajgraph "
                f"reads version {VERSION} (delete it to ingest every file again)"
            )
        return cls(p, data)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """An exclusive, non-blocking lock on ``<manifest>.lock`` for the whole run."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise TrajgraphError(
                    f"another ingest is using the manifest {self.path} (lock {lock_path}); "
                    "run one job per manifest at a time"
                ) from e
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def scope(self, tenant: str, id_prefix: str, *, create: bool = False) -> dict[str, Any]:
        for s in self.data["scopes"]:
            if s.get("tenant") == tenant and s.get("id_prefix", "") == id_prefix:
                s.setdefault("files", {})
                return s
        s = {"tenant": tenant, "id_prefix": id_prefix, "files": {}}
        if create:
            self.data["scopes"].append(s)
        return s

    def plan(
        self,
        sources: Iterable[str],
        *,
        tenant: str,
        id_prefix: str,
        config: str,
        rescan: bool = False,
    ) -> Plan:
        """Which of ``sources`` to ingest, which to skip, and which known files disappeared."""
        entries: Mapping[str, dict[str, Any]] = self.scope(tenant, id_prefix)["files"]
        plan = Plan()
        seen: set[str] = set()
        for source in sources:
            key = file_key(source)
            seen.add(key)
            st = stat_file(source)
            if st is None:  # vanished between listing and planning: the reader will report it
                plan.todo.append(PlannedFile(source, key, FileStat(-1, -1), "", "new"))
                continue
            entry = entries.get(key)
            fast = (
                entry is not None
                and entry.get("size") == st.size
                and entry.get("mtime_ns") == st.mtime_ns
                and bool(entry.get("sha256"))
            )
            digest = str(entry["sha256"]) if fast and entry else sha256_file(source)
            item = PlannedFile(source, key, st, digest, "new")
            if entry is None:
                plan.todo.append(item)
                continue
            if entry.get("sha256") != digest:
                item.reason = "changed"
            elif entry.get("config") != config:
                item.reason = "config"
            elif entry.get("status") != DONE:
                item.reason = f"retry-{entry.get('status')}"
            elif rescan:
                item.reason = "rescan"
            else:
                item.reason = "unchanged"
                plan.skipped.append(item)
                continue
            plan.todo.append(item)
        for key, entry in entries.items():
            if key not in seen and stat_file(key) is None:
                plan.missing.append({"key": key, **entry})
        return plan

    def record(
        self,
        plan: Plan,
        *,
        tenant: str,
        id_prefix: str,
        config: str,
        failed: Mapping[str, int],
        degraded: Mapping[str, int],
        run: dict[str, Any] | None = None,
    ) -> None:
        """The outcome of a run whose graph write succeeded. ``failed`` and ``degraded`` map
        file keys to their dead letters and unanswered windows (files absent there are done)."""
        scope = self.scope(tenant, id_prefix, create=True)
        files: dict[str, dict[str, Any]] = scope["files"]
        stamp = now_iso()
        for f in plan.todo:
            if f.stat.size < 0:  # it was gone when planned: nothing to remember
                files.pop(f.key, None)
                continue
            status = FAILED if f.key in failed else DEGRADED if f.key in degraded else DONE
            previous = files.get(f.key, {})
            files[f.key] = {
                "source": f.source,
                "size": f.stat.size,
                "mtime_ns": f.stat.mtime_ns,
                "sha256": f.sha256,
                "config": config,
                "status": status,
                "dead_letters": int(failed.get(f.key, 0)),
                "windows_degraded": int(degraded.get(f.key, 0)),
                "checked_at": stamp,
                "ingested_at": stamp if status == DONE else previous.get("ingested_at"),
            }
        for f in plan.skipped:  # same content: refresh size and mtime for the fast path
            entry = files[f.key]
            entry.update(size=f.stat.size, mtime_ns=f.stat.mtime_ns, checked_at=stamp)
        for gone in plan.missing:
            files.pop(gone["key"], None)
        if run is not None:
            scope["last_run"] = run
        self.data["updated_at"] = stamp

    def save(self) -> None:
        write_json_atomic(self.path, self.data)
