"""The ingest pipeline's composite transforms, shared by batch and streaming runs.

read → normalize → validate → key by trajectory → windows → extract → merge → write,
with every failed record routed to one dead-letter PCollection.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import logging
import lzma
import os
import pickle
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from trajgraph.core.errors import GraphError, InputError
from trajgraph.core.settings import EmbedderSettings, LLMSettings, Neo4jSettings
from trajgraph.graph import node_ids
from trajgraph.graph import writer as graph_writer
from trajgraph.graph.rows import GraphRows, build_rows, content_hash
from trajgraph.pipelines import dead_letter, progress
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.base import Located, RawRecord
from trajgraph.schemas.trajectory import validate

NS = "trajgraph"
DUPLICATES = "duplicates"
FAILURES = "failures"
FLUSH_BATCHES = 8


def _count(name: str, n: int = 1) -> None:
    Metrics.counter(NS, name).inc(n)
    progress.bump(name, n)


# -- read ------------------------------------------------------------------------------------


class SplitFileFn(beam.DoFn):
    def __init__(self, fmt: str | None, max_record_bytes: int) -> None:
        self._fmt = fmt
        self._max = max_record_bytes

    def process(self, readable: fileio.ReadableFile) -> Iterator[RawRecord]:
        path = str(readable.metadata.path)
        limit = None if _is_line_format(path, self._fmt) else self._max
        if limit is not None and readable.metadata.size_in_bytes > limit:
            raise InputError(
                f"file is {readable.metadata.size_in_bytes} bytes, over the "
                f"{self._max}-byte record limit",
                source=path,
                locator="file",
            )
        data = _read_whole(readable, limit)
        if limit is not None and len(data) > limit:
            raise InputError(
                f"file is over the {self._max}-byte record limit as read (decompressed, or grown "
                "since it was listed)",
                source=path,
                locator="file",
            )
        records = list(split_records(path, data, self._fmt, max_record_bytes=self._max))
        _count("records", len(records))
        _count("files")
        yield from records


READ_CHUNK_BYTES = 8 << 20


# Decompressors whose read(n) returns at most n bytes. Beam's own (the fallback, for deflate
# and zstd) decompresses a whole 16 MiB of input per step, however far it expands.
_BOUNDED_READERS: dict[str, Any] = {
    CompressionTypes.GZIP: lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    CompressionTypes.BZIP2: bz2.BZ2File,
    CompressionTypes.LZMA: lzma.LZMAFile,
}


def _read_whole(readable: fileio.ReadableFile, limit: int | None) -> bytes:
    """The file's bytes, decompressed when Beam would open it so (``*.gz``, ``*.bz2``, ...),
    and no more than ``limit + 1`` of them. A compressed file's ``read()`` returns one 16 MiB
    buffer, not the file: it is read in chunks to its end (or past the limit, no further)."""
    path = str(readable.metadata.path)
    compression = CompressionTypes.detect_compression_type(path)
    mime = "application/octet-stream"
    if compression == CompressionTypes.UNCOMPRESSED:
        with readable.open(mime) as f:
            data: bytes = f.read() if limit is None else f.read(limit + 1)
            return data
    bounded = _BOUNDED_READERS.get(compression)
    with contextlib.ExitStack() as stack:
        if bounded is not None:
            raw = stack.enter_context(
                FileSystems.open(path, mime, compression_type=CompressionTypes.UNCOMPRESSED)
            )
            f = stack.enter_context(bounded(raw))
        else:
            f = stack.enter_context(readable.open(mime))
        chunks: list[bytes] = []
        total = 0
        while limit is None or total <= limit:
            chunk = f.read(READ_CHUNK_BYTES if limit is None else limit + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)


def _is_line_format(path: str, fmt: str | None) -> bool:
    return fmt in ("canonical", "ama-bench", "parquet") or path.endswith(
        (".jsonl", ".ndjson", ".parquet")
    )


class StatFileFn(beam.DoFn):
    """A listed file's metadata, found by its exact name.

    The paths were matched already (``preflight.expand_paths``); Beam's ``MatchAll`` would
    read ``[``, ``*`` and ``?`` in a file's name as a glob again, so ``run[1].json`` read
    ``run1.json`` instead, or nothing at all, without a dead letter."""

    def process(self, raw: bytes) -> Iterator[Any]:
        path = os.fsdecode(raw)
        try:
            path.encode("utf-8")
        except UnicodeEncodeError as e:
            # A local name that is not UTF-8 (Python holds it as lone surrogates): no record
            # of it could be written (its source is on every node), so it is refused whole.
            raise InputError(
                "the file name is not valid UTF-8: rename the file", source=path, locator="file"
            ) from e
        try:
            yield FileSystems.get_filesystem(path).metadata(path)
        except Exception as e:  # BeamIOError: gone or unreadable since it was listed
            raise InputError(f"cannot read the file: {e}", source=path, locator="file") from e


class ReadLogRecords(beam.PTransform):
    """File paths → RawRecords; files that cannot be split go to ``bad``."""

    def __init__(self, paths: list[str], fmt: str | None, max_record_bytes: int) -> None:
        super().__init__()
        self._paths = paths
        self._fmt = fmt
        self._max = max_record_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> Any:
        found, missing = (
            pbegin
            # As bytes: Beam's coder of a str refused a file name that is not UTF-8 while the
            # pipeline was built, and the whole run ended with a traceback.
            | "Create paths" >> beam.Create([os.fsencode(p) for p in self._paths])
            | "Find files" >> beam.ParDo(StatFileFn()).with_exception_handling()
        )
        good, bad = (
            found
            | "Open files" >> fileio.ReadMatches()
            | "Split files into records"
            >> beam.ParDo(SplitFileFn(self._fmt, self._max)).with_exception_handling()
        )
        return {
            "records": good,
            "bad": (missing, bad)
            | "Flatten read failures" >> beam.Flatten()
            | "Describe read failures" >> beam.Map(describe_failure, "read"),
        }


def describe_failure(bad: Any, stage: str) -> dict[str, Any]:
    _count("dead_lettered")
    if stage == "read":
        _count("records")  # an unreadable file is one record that never split
    return dead_letter.from_exception(stage, bad)


# -- normalize and validate ------------------------------------------------------------------


def choose_tenant(own: Any, operator: str, *, records_choose: bool) -> tuple[str | Any, str]:
    """The tenant a record is written to, and why: ``operator`` (the record names none, or
    the same), ``overridden`` (it names another, and the operator's wins) or ``own`` (it
    names another and ``records_choose``). One run writes one tenant unless the operator
    lets records choose (``--tenant-from-records``): a log must not pick where it lands."""
    if own is None or own == "" or own == operator:
        return operator, "operator"
    if records_choose:
        return own, "own"
    return operator, "overridden"


TENANT_COUNTERS = {"overridden": "tenant_overridden", "own": "tenant_own"}


class NormalizeFn(beam.DoFn):
    def __init__(self, tenant: str, id_prefix: str = "", tenant_from_records: bool = False) -> None:
        self._tenant = tenant
        self._prefix = id_prefix
        self._records_choose = tenant_from_records

    def process(self, record: RawRecord) -> Iterator[Located]:
        trajectories = normalize(record)
        if not trajectories:
            raise InputError(
                "record holds no trajectory", source=record.source, locator=record.locator
            )
        if len(trajectories) > 1:
            # One record holding several trajectories (a Claude Code session and its
            # sub-agents, a trace export) counts once per trajectory, so that records still
            # balance ingested + dead-lettered.
            _count("records", len(trajectories) - 1)
        for traj in trajectories:
            traj["tenant"], why = choose_tenant(
                traj.get("tenant"), self._tenant, records_choose=self._records_choose
            )
            if why in TENANT_COUNTERS:
                _count(TENANT_COUNTERS[why])
            if self._prefix and isinstance(traj.get("id"), str):
                traj["id"] = self._prefix + traj["id"]
            yield Located(record.source, record.locator, traj)


class ValidateFn(beam.DoFn):
    def process(self, item: Located) -> Iterator[Located]:
        validate(item.trajectory, locator=item.locator)
        yield item


class NormalizeTrajectories(beam.PTransform):
    def __init__(
        self, tenant: str, id_prefix: str = "", *, tenant_from_records: bool = False
    ) -> None:
        super().__init__()
        self._tenant = tenant
        self._prefix = id_prefix
        self._records_choose = tenant_from_records

    def expand(self, records: Any) -> Any:
        normalize_fn = NormalizeFn(self._tenant, self._prefix, self._records_choose)
        normalized, bad_norm = (
            records | "Parse and normalize" >> beam.ParDo(normalize_fn).with_exception_handling()
        )
        valid, bad_valid = (
            normalized
            | "Validate against schema" >> beam.ParDo(ValidateFn()).with_exception_handling()
        )
        bad = (
            bad_norm | "Describe normalize failures" >> beam.Map(describe_failure, "normalize"),
            bad_valid | "Describe validation failures" >> beam.Map(describe_failure, "validate"),
        ) | "Flatten record failures" >> beam.Flatten()
        return {"trajectories": valid, "bad": bad}


# -- windows, extraction and merge ----------------------------------------------------------


class LocatedCoder(beam.coders.Coder):
    """Normalized trajectories, pickled and zlib-compressed (level 1).

    The group by trajectory id is the pipeline's one shuffle and it carries every trajectory
    whole: the DirectRunner holds all of it in memory (twice: its buffer and the worker's
    copy) until extraction ends, distributed runners write it to their shuffle. Log text
    compresses about 4× (the real logs) to 5× (synthetic ones), so the held bytes shrink by
    that much for about 1 % more CPU.
    """

    def encode(self, value: Located) -> bytes:
        return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)

    def decode(self, encoded: bytes) -> Located:
        value: Located = pickle.loads(zlib.decompress(encoded))
        return value

    def is_deterministic(self) -> bool:
        return False  # only ever a value, never a key

    def to_type_hint(self) -> Any:
        return Located


beam.coders.registry.register_coder(Located, LocatedCoder)


def trajectory_key(item: Located) -> tuple[str, Located]:
    t = item.trajectory
    return node_ids.trajectory_uid(t["tenant"], t["id"]), item


class DropDuplicateIdsFn(beam.DoFn):
    """Two records with one trajectory id (per tenant): keep the first, dead-letter the rest."""

    def process(self, grouped: tuple[str, Iterable[Located]]) -> Iterator[Any]:
        _key, items = grouped
        ordered = sorted(items, key=lambda i: (i.source, i.locator))
        first = ordered[0]
        for dup in ordered[1:]:
            _count("dead_lettered")
            yield beam.pvalue.TaggedOutput(
                DUPLICATES,
                dead_letter.row(
                    "merge",
                    dup.source,
                    dup.locator,
                    f"duplicate trajectory id {dup.trajectory['id']!r} in tenant "
                    f"{dup.trajectory['tenant']!r}: already ingested from {first.source} "
                    f"[{first.locator}]",
                ),
            )
        yield first


class ExtractTrajectoryFn(beam.DoFn):
    """Slide windows over trajectories, extract them, merge, build graph rows.

    The three stages run in one DoFn because a runner would fuse them anyway and moving
    thousands of per-window extractions through a shuffle only to regroup them by trajectory
    costs more than extracting; it also lets the LLM extractor pack a trajectory's windows
    into few requests. Elements are small batches of trajectories: with an LLM they are
    extracted on ``threads`` threads, so small trajectories do not wait for each other's
    replies (the client bounds the requests in flight). A window whose extraction fails goes
    to the dead letters on its own; its turn still reaches the graph.
    """

    def __init__(
        self,
        extractor: str,
        budget_tokens: int,
        llm: LLMSettings | None = None,
        use_cache: bool = True,
        threads: int = 1,
        embedder_name: str = "",
    ) -> None:
        self._name = extractor
        self._embed = embedder_name
        self._budget = budget_tokens
        self._llm = llm
        self._use_cache = use_cache
        self._threads = threads
        self._extractor: Any = None
        self._pool: Any = None

    def setup(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from trajgraph.extractors import get_extractor

        self._extractor = get_extractor(self._name, llm=self._llm, use_cache=self._use_cache)
        if self._threads > 1:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="trajgraph-extract")

    def teardown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._extractor is not None:
            self._extractor.close()

    def process(self, batch: list[Located]) -> Iterator[Any]:
        if self._pool is not None and len(batch) > 1:
            results = list(self._pool.map(self._extract_one, batch))
        else:
            results = [self._extract_one(item) for item in batch]
        # Beam metrics belong to the DoFn's thread: workers return counts, this thread reports.
        counts: Counter[str] = Counter(self._extractor.drain_stats())
        for outputs, n in results:
            counts.update(n)
            yield from outputs
        for name, value in counts.items():
            _count(name, value)

    def _extract_one(self, item: Located) -> tuple[list[Any], Counter[str]]:
        outputs: list[Any] = []
        counts: Counter[str] = Counter()
        try:
            self._extract(item, outputs, counts)
        except Exception as e:  # the trajectory cannot be built: a dead letter, not a crash
            counts["dead_lettered"] += 1
            outputs.append(
                beam.pvalue.TaggedOutput(
                    FAILURES, dead_letter.row("extract", item.source, item.locator, repr(e))
                )
            )
        return outputs, counts

    def _extract(self, item: Located, outputs: list[Any], counts: Counter[str]) -> None:
        from trajgraph.extractors.merge import merge
        from trajgraph.extractors.windows import build_windows

        traj = item.trajectory
        windows = build_windows(traj, budget_tokens=self._budget)
        batch = self._extractor.extract_windows(windows, task=str(traj.get("task") or ""))
        for turn, e in batch.failures:
            counts["windows_failed"] += 1
            outputs.append(
                beam.pvalue.TaggedOutput(
                    FAILURES,
                    dead_letter.row("extract", item.source, f"{item.locator} turn {turn}", repr(e)),
                )
            )
        counts["turns"] += len(traj["turns"])
        counts["windows"] += len(batch.extractions)
        counts["windows_degraded"] += len(batch.retry)
        merged = merge(traj["turns"], batch.extractions)
        fingerprint = self._extractor.fingerprint + (f"|{self._embed}" if self._embed else "")
        digest = content_hash(traj, merged, extractor=fingerprint)
        rows = build_rows(traj, merged, extractor=self._extractor.label, content_hash=digest)
        rows.retry_windows = len(batch.retry)
        rows.version = item.version
        outputs.append(rows)


class EmbedRowsFn(beam.DoFn):
    """Adds an ``embedding`` to every State and Turn row, in batches, before the write.

    A trajectory whose content hash is already in the graph is passed on untouched: the
    writer skips it, so embedding it again would be wasted work on every re-ingest. Texts go
    through graph/embed_cache.py: a text seen before (in this run, or in any run with the
    same embedder when the disk cache is on) is not embedded again.
    """

    SPACE_RECHECK_S = graph_writer.SPACE_RECHECK_S  # a stream above all may outlive a move

    def __init__(self, neo: Neo4jSettings, embedder: EmbedderSettings) -> None:
        self._neo = neo
        self._settings = embedder
        self._driver: Any = None
        self._embedder: Any = None
        self._model = ""
        self._space_checked = 0.0
        self._moved_to: str | None = None

    def setup(self) -> None:
        from trajgraph.graph.connection import open_driver
        from trajgraph.graph.embed_cache import cached_embedder
        from trajgraph.graph.embedders import embedder_name, get_embedder

        self._driver = open_driver(self._neo)
        self._embedder = cached_embedder(get_embedder(self._settings), self._settings)
        self._model = embedder_name(self._settings)
        self._space_checked = time.monotonic()  # the run's preflight has just checked it

    def process(self, rows: GraphRows) -> Iterator[GraphRows]:
        from trajgraph.graph import cypher
        from trajgraph.graph.connection import graph_errors
        from trajgraph.graph.embedders import state_text, turn_text

        with graph_errors("reading the stored trajectory hash"):
            found = self._driver.execute_query(
                cypher.EXISTING_HASH, uid=rows.trajectory_uid, database_=self._neo.database
            ).records
        if found and found[0]["content_hash"] == rows.content_hash:
            rows.embedding_skipped = True  # the writer skips it too, unless it changed since
            yield rows
            return
        self._watch_space()
        targets = [(r, state_text) for r in rows.rows["states"]]
        targets += [(r, turn_text) for r in rows.rows["turns"]]
        if found:  # a changed trajectory: keep the vectors of nodes whose text did not change
            reused = self._existing(targets)
            for row, _ in targets:
                if row["uid"] in reused:
                    row["embedding"] = reused[row["uid"]]
            _count("embeddings_reused", len(reused))
            targets = [(row, text) for row, text in targets if "embedding" not in row]
        size = max(1, self._settings.batch_size)
        try:
            for i in range(0, len(targets), size):
                chunk = targets[i : i + size]
                vectors = self._embedder.embed([text(row["props"]) for row, text in chunk])
                for (row, _), vector in zip(chunk, vectors, strict=True):
                    row["embedding"] = vector
        except Exception as e:
            # The trajectory is still written (it is not lost), without vectors, and under a
            # content hash no run produces, so the next ingest rewrites it with embeddings.
            logging.getLogger(__name__).warning(
                "embedding trajectory %s failed, written without vectors: %r",
                rows.trajectory_uid,
                e,
            )
            for row, _ in targets:
                row.pop("embedding", None)
            rows.content_hash += ":unembedded"
            for row in rows.rows["complete"]:
                row["content_hash"] = rows.content_hash
            _count("embed_failed")
            self._report_cache()
            yield rows
            return
        # Each vector names the model that made it: a vector another model wrote behind a
        # `trajgraph reembed` (an old ingest still running) is found by the next one.
        for kind in ("states", "turns"):
            for row in rows.rows[kind]:
                if "embedding" in row:
                    row["props"]["embedded_with"] = self._model
        _count("embedded", len(targets))
        self._report_cache()
        yield rows

    def _watch_space(self) -> None:
        """Say so, once per move, when `trajgraph reembed` moved the graph to another model
        while this run writes vectors of its own. They are still written, stamped with this
        run's model: retrieval skips them, and `trajgraph reembed` run again remakes them
        (a stream has no later run that would write them again)."""
        if time.monotonic() - self._space_checked < self.SPACE_RECHECK_S:
            return
        from trajgraph.graph.writer import embedding_space

        self._space_checked = time.monotonic()
        try:
            space = embedding_space(self._driver, self._neo.database)
        except GraphError:
            return  # the write that follows says what is wrong with Neo4j
        moved = space[0] if space is not None and space[0] != self._model else None
        if moved is not None and moved != self._moved_to:
            logging.getLogger(__name__).warning(
                "`trajgraph reembed` moved the graph to %s: this run still writes vectors of "
                "%s, which retrieval skips until `trajgraph reembed` runs again; restart it "
                "with the graph's embedder",
                moved,
                self._model,
            )
            _count("space_moved")
        self._moved_to = moved

    def _report_cache(self) -> None:
        drain = getattr(self._embedder, "drain_stats", None)  # absent with the cache off
        for name, value in (drain() if drain else {}).items():
            if value:
                _count(name, value)

    def _existing(self, targets: list[tuple[dict[str, Any], Any]]) -> dict[str, list[float]]:
        from trajgraph.graph import cypher
        from trajgraph.graph.connection import graph_errors

        probe = [
            {
                "uid": row["uid"],
                "text": row["props"].get("text"),
                "action": row["props"].get("action"),
                "observation": row["props"].get("observation"),
            }
            for row, _ in targets
        ]
        with graph_errors("reading stored embeddings"):
            records = self._driver.execute_query(
                cypher.EXISTING_EMBEDDINGS,
                rows=probe,
                model=self._model,
                database_=self._neo.database,
            ).records
        return {r["uid"]: list(r["embedding"]) for r in records}

    def teardown(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
        if self._driver is not None:
            self._driver.close()


class GraphWriterFn(beam.DoFn):
    """What every DoFn that writes the graph shares, batch (:class:`WriteGraphFn`) and
    stream (stream_transforms.WriteNewestVersionFn) alike: ``setup()`` opens the driver,
    ensures the schema and builds the GraphWriter; ``teardown()`` closes the driver. A
    subclass says how it writes (``process``), and adds to both ends what else it holds."""

    def __init__(self, neo: Neo4jSettings, batch_size: int) -> None:
        self._neo = neo
        self._batch_size = batch_size
        self._driver: Any = None
        self._writer: Any = None

    def setup(self) -> None:
        from trajgraph.graph.connection import open_driver
        from trajgraph.graph.writer import GraphWriter, ensure_schema

        self._driver = open_driver(self._neo)
        ensure_schema(self._driver, self._neo.database)
        self._writer = GraphWriter(self._driver, self._neo.database, batch_size=self._batch_size)

    def teardown(self) -> None:
        if self._driver is not None:
            self._driver.close()

    @staticmethod
    def _count_written(stats: Any) -> None:
        """A write's WriteStats as the run's counters; from the DoFn's own thread (Beam
        reports metrics per thread)."""
        _count("trajectories_written", stats.trajectories)
        _count("trajectories_unchanged", stats.unchanged)
        _count("rows_written", stats.rows)


class WriteGraphFn(GraphWriterFn):
    """Buffers GraphRows and writes them in UNWIND batches on one background thread, so
    extraction (Python) and Neo4j (its own process) work at the same time. Batches are written
    in order, at most MAX_IN_FLIGHT wait at once, and a bundle ends only when all are written."""

    MAX_IN_FLIGHT = 2

    def __init__(self, neo: Neo4jSettings, batch_size: int) -> None:
        super().__init__(neo, batch_size)
        self._pool: Any = None
        self._in_flight: list[Any] = []
        self._failed: Any = None  # a threading.Event, made in setup (it does not pickle)

    def setup(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        super().setup()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajgraph-write")
        self._failed = threading.Event()

    def start_bundle(self) -> None:
        self._in_flight = []
        self._failed.clear()

    def process(self, rows: GraphRows) -> Iterator[NoReturn]:
        yield from ()  # a sink; still a generator, as Beam expects of process
        self._writer.add(rows)
        # A flush runs one statement per row kind; buffering several batches' worth keeps
        # each statement's UNWIND near batch_size rows instead of a few dozen.
        if self._writer.pending_rows >= self._batch_size * FLUSH_BATCHES:
            self._submit()
        self._collect(wait=False)

    def finish_bundle(self) -> None:
        self._submit()
        self._collect(wait=True)

    def _submit(self) -> None:
        batch = self._writer.take()
        if batch:
            while len(self._in_flight) >= self.MAX_IN_FLIGHT:
                self._collect_one()
            self._in_flight.append(self._pool.submit(self._write, batch))

    def _write(self, batch: list[GraphRows]) -> Any:
        # On the one writer thread, in order: once a batch failed for good (the driver's
        # retries are spent), the ones queued behind it fail at once instead of each
        # waiting out the same retries against the same dead server.
        if self._failed.is_set():
            raise GraphError("not written: an earlier batch of this bundle failed")
        try:
            return self._writer.write_batch(batch)
        except BaseException:
            self._failed.set()
            raise

    def _collect(self, *, wait: bool) -> None:
        while self._in_flight and (wait or self._in_flight[0].done()):
            self._collect_one()

    def _collect_one(self) -> None:
        # Metrics must be reported from the DoFn's own thread, so results come back here.
        self._count_written(self._in_flight.pop(0).result())

    def teardown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        super().teardown()


class WriteGraph(beam.PTransform):
    """GraphRows → node embeddings (when an embedder is given) → batched Neo4j writes."""

    def __init__(
        self, neo: Neo4jSettings, batch_size: int, embedder: EmbedderSettings | None = None
    ) -> None:
        super().__init__()
        self._neo = neo
        self._batch_size = batch_size
        self._embedder = embedder

    def expand(self, rows: Any) -> Any:
        if self._embedder is not None:
            rows = rows | "Embed states and turns" >> beam.ParDo(
                EmbedRowsFn(self._neo, self._embedder)
            )
        return self.write(rows)

    def write(self, rows: Any) -> Any:
        return rows | "Write batches to Neo4j" >> beam.ParDo(
            WriteGraphFn(self._neo, self._batch_size)
        )


class BuildGraphRows(beam.PTransform):
    """Valid trajectories → GraphRows, plus dead-letter rows for duplicates and failures."""

    def __init__(
        self,
        extractor: str,
        budget_tokens: int,
        llm: LLMSettings | None = None,
        use_cache: bool = True,
        embedder_name: str = "",
    ) -> None:
        super().__init__()
        self._extractor = extractor
        self._budget = budget_tokens
        self._llm = llm
        self._use_cache = use_cache
        self._embedder_name = embedder_name

    def expand(self, trajectories: Any) -> Any:
        unique = (
            trajectories
            | "Key by trajectory"
            >> beam.Map(trajectory_key).with_output_types(beam.typehints.KV[str, Located])
            | "Group records by trajectory id" >> beam.GroupByKey()
            | "Drop duplicate ids"
            >> beam.ParDo(DropDuplicateIdsFn()).with_outputs(DUPLICATES, main="unique")
        )
        threads = self._llm.concurrency if self._extractor == "llm" and self._llm else 1
        built = (
            unique.unique
            | "Batch trajectories"
            >> beam.BatchElements(min_batch_size=threads, max_batch_size=threads * 2)
            | "Extract and merge windows"
            >> beam.ParDo(
                ExtractTrajectoryFn(
                    self._extractor,
                    self._budget,
                    self._llm,
                    self._use_cache,
                    threads,
                    self._embedder_name,
                )
            ).with_outputs(FAILURES, main="rows")
        )
        return {"rows": built.rows, "bad": built[FAILURES], "duplicates": unique[DUPLICATES]}
