"""The ingest pipeline's composite transforms, shared by batch and streaming runs.

read → normalize → validate → key by trajectory → windows → extract → merge → write,
with every failed record routed to one dead-letter PCollection.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.metrics import Metrics

from graph import ids
from graph.rows import GraphRows, build_rows, content_hash
from pipelines import dead_letter, progress
from pipelines.adapters import normalize, split_records
from pipelines.adapters.base import RawRecord
from schemas.trajectory import validate
from trajgraph.errors import InputError
from trajgraph.settings import Neo4jSettings

NS = "trajgraph"
DUPLICATES = "duplicates"


@dataclass(frozen=True)
class Located:
    """A normalized trajectory together with the record it came from (for dead-letter rows)."""

    source: str
    locator: str
    trajectory: dict[str, Any]


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
        if readable.metadata.size_in_bytes > self._max and not _is_line_format(path, self._fmt):
            raise InputError(
                f"file is {readable.metadata.size_in_bytes} bytes, over the "
                f"{self._max}-byte record limit",
                source=path,
                locator="file",
            )
        records = list(split_records(path, readable.read(), self._fmt, max_record_bytes=self._max))
        _count("records", len(records))
        _count("files")
        yield from records


def _is_line_format(path: str, fmt: str | None) -> bool:
    return fmt in ("canonical", "ama-bench", "parquet") or path.endswith(
        (".jsonl", ".ndjson", ".parquet")
    )


class ReadLogRecords(beam.PTransform):
    """File paths → RawRecords; files that cannot be split go to ``bad``."""

    def __init__(self, paths: list[str], fmt: str | None, max_record_bytes: int) -> None:
        super().__init__()
        self._paths = paths
        self._fmt = fmt
        self._max = max_record_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> Any:
        files = (
            pbegin
            | "Create paths" >> beam.Create(self._paths)
            | "Match files" >> fileio.MatchAll()
            | "Open files" >> fileio.ReadMatches()
        )
        good, bad = (
            files
            | "Split files into records"
            >> beam.ParDo(SplitFileFn(self._fmt, self._max)).with_exception_handling()
        )
        return {"records": good, "bad": bad | "Describe read failures" >> beam.Map(_dead, "read")}


def _dead(bad: Any, stage: str) -> dict[str, Any]:
    _count("dead_lettered")
    if stage == "read":
        _count("records")  # an unreadable file is one record that never split
    return dead_letter.from_exception(stage, bad)


# -- normalize and validate ------------------------------------------------------------------


class NormalizeFn(beam.DoFn):
    def __init__(self, tenant: str, id_prefix: str = "") -> None:
        self._tenant = tenant
        self._prefix = id_prefix

    def process(self, record: RawRecord) -> Iterator[Located]:
        trajectories = normalize(record)
        if not trajectories:
            raise InputError(
                "record holds no trajectory", source=record.source, locator=record.locator
            )
        for traj in trajectories:
            if not traj.get("tenant"):
                traj["tenant"] = self._tenant
            if self._prefix and isinstance(traj.get("id"), str):
                traj["id"] = self._prefix + traj["id"]
            yield Located(record.source, record.locator, traj)


class ValidateFn(beam.DoFn):
    def process(self, item: Located) -> Iterator[Located]:
        validate(item.trajectory, locator=item.locator)
        yield item


class NormalizeTrajectories(beam.PTransform):
    def __init__(self, tenant: str, id_prefix: str = "") -> None:
        super().__init__()
        self._tenant = tenant
        self._prefix = id_prefix

    def expand(self, records: Any) -> Any:
        normalized, bad_norm = (
            records
            | "Parse and normalize"
            >> beam.ParDo(NormalizeFn(self._tenant, self._prefix)).with_exception_handling()
        )
        valid, bad_valid = (
            normalized
            | "Validate against schema" >> beam.ParDo(ValidateFn()).with_exception_handling()
        )
        bad = (
            bad_norm | "Describe normalize failures" >> beam.Map(_dead, "normalize"),
            bad_valid | "Describe validation failures" >> beam.Map(_dead, "validate"),
        ) | "Flatten record failures" >> beam.Flatten()
        return {"trajectories": valid, "bad": bad}


# -- windows and extraction ------------------------------------------------------------------


def trajectory_key(item: Located) -> tuple[str, Located]:
    t = item.trajectory
    return ids.trajectory_uid(t["tenant"], t["id"]), item


class BuildWindowsFn(beam.DoFn):
    def __init__(self, budget_tokens: int) -> None:
        self._budget = budget_tokens

    def process(self, keyed: tuple[str, Located]) -> Iterator[tuple[str, Any]]:
        from pipelines.windows import build_windows

        key, item = keyed
        windows = build_windows(item.trajectory, budget_tokens=self._budget)
        _count("turns", len(item.trajectory["turns"]))
        for w in windows:
            yield key, w


class ExtractFn(beam.DoFn):
    def __init__(self, extractor: str) -> None:
        self._name = extractor
        self._extractor: Any = None

    def setup(self) -> None:
        from extractors import get_extractor

        self._extractor = get_extractor(self._name)

    def process(self, keyed: tuple[str, Any]) -> Iterator[tuple[str, Any]]:
        key, window = keyed
        extraction = self._extractor.extract(window)
        _count("windows")
        yield key, extraction


class ExtractWindows(beam.PTransform):
    """Keyed trajectories → keyed WindowExtractions (one per turn)."""

    def __init__(self, extractor: str, budget_tokens: int) -> None:
        super().__init__()
        self._extractor = extractor
        self._budget = budget_tokens

    def expand(self, keyed: Any) -> Any:
        windows = keyed | "Slide windows" >> beam.ParDo(BuildWindowsFn(self._budget))
        extracted, bad = (
            windows
            | "Extract states and objects"
            >> beam.ParDo(ExtractFn(self._extractor)).with_exception_handling()
        )
        return {
            "extractions": extracted,
            "bad": bad | "Describe extraction failures" >> beam.Map(_window_failure),
        }


def _window_failure(bad: Any) -> dict[str, Any]:
    # The turn itself still reaches the graph; only this window's states are missing.
    (key, window), (exc_type, exc_repr, _tb) = bad
    _count("windows_failed")
    name = getattr(exc_type, "__name__", str(exc_type))
    return dead_letter.row(
        "extract",
        str(getattr(window, "trajectory_id", key)),
        f"turn {getattr(window, 'turn', '?')}",
        exc_repr if exc_repr.startswith(name) else f"{name}: {exc_repr}",
    )


# -- merge and write -------------------------------------------------------------------------


class DropDuplicateIdsFn(beam.DoFn):
    """Two records with one trajectory id (per tenant): keep the first, dead-letter the rest."""

    def process(self, grouped: tuple[str, list[Located]]) -> Iterator[Any]:
        key, items = grouped
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
        yield key, first


class MergeTrajectoryFn(beam.DoFn):
    def __init__(self, extractor: str, budget_tokens: int) -> None:
        self._extractor = extractor
        self._budget = budget_tokens

    def process(self, grouped: tuple[str, dict[str, list[Any]]]) -> Iterator[GraphRows]:
        from extractors.merge import merge

        _key, parts = grouped
        (item,) = parts["trajectory"]
        traj = item.trajectory
        merged = merge(traj["turns"], list(parts["extractions"]))
        digest = content_hash(traj, extractor=self._extractor, budget_tokens=self._budget)
        yield build_rows(traj, merged, extractor=self._extractor, content_hash=digest)


class WriteGraphFn(beam.DoFn):
    """Buffers GraphRows per bundle and writes them in UNWIND batches."""

    def __init__(self, neo: Neo4jSettings, batch_size: int) -> None:
        self._neo = neo
        self._batch_size = batch_size
        self._driver: Any = None
        self._writer: Any = None

    def setup(self) -> None:
        from graph.connection import open_driver
        from graph.writer import ensure_schema

        self._driver = open_driver(self._neo)
        ensure_schema(self._driver, self._neo.database)

    def start_bundle(self) -> None:
        from graph.writer import GraphWriter

        self._writer = GraphWriter(self._driver, self._neo.database, batch_size=self._batch_size)

    def process(self, rows: GraphRows) -> None:
        self._writer.add(rows)
        if self._writer.pending_rows >= self._batch_size:
            self._flush()

    def finish_bundle(self) -> None:
        self._flush()

    def _flush(self) -> None:
        stats = self._writer.flush()
        _count("trajectories_written", stats.trajectories)
        _count("trajectories_unchanged", stats.unchanged)
        _count("rows_written", stats.rows)

    def teardown(self) -> None:
        if self._driver is not None:
            self._driver.close()


class WriteGraph(beam.PTransform):
    def __init__(self, neo: Neo4jSettings, batch_size: int) -> None:
        super().__init__()
        self._neo = neo
        self._batch_size = batch_size

    def expand(self, rows: Any) -> Any:
        return rows | "Write batches to Neo4j" >> beam.ParDo(
            WriteGraphFn(self._neo, self._batch_size)
        )


class BuildGraphRows(beam.PTransform):
    """Valid trajectories → GraphRows (plus dead-letter rows for windows and duplicates)."""

    def __init__(self, extractor: str, budget_tokens: int) -> None:
        super().__init__()
        self._extractor = extractor
        self._budget = budget_tokens

    def expand(self, trajectories: Any) -> Any:
        unique = (
            trajectories
            | "Key by trajectory" >> beam.Map(trajectory_key)
            | "Group records by trajectory id" >> beam.GroupByKey()
            | "Drop duplicate ids"
            >> beam.ParDo(DropDuplicateIdsFn()).with_outputs(DUPLICATES, main="unique")
        )
        keyed = unique.unique
        ext = keyed | "Extract windows" >> ExtractWindows(self._extractor, self._budget)
        rows = (
            {"trajectory": keyed, "extractions": ext["extractions"]}
            | ("Group extractions by trajectory" >> beam.CoGroupByKey())
            | "Merge extractions" >> beam.ParDo(MergeTrajectoryFn(self._extractor, self._budget))
        )
        return {"rows": rows, "bad": ext["bad"], "duplicates": unique[DUPLICATES]}
