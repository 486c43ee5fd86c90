"""What a pipeline run settles before Beam starts: the configuration both pipelines take
(:class:`PipelineConfig`, checked once for both), the input files it reads, the embedder it
uses, whether the graph can take it, and where its dead letters go by default.

Shared by the batch and the streaming pipeline; each check fails with the reason (a
ConfigError, InputError or GraphError), not a Beam trace from a worker.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from apache_beam.io.filesystems import FileSystems

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError, InputError
from trajgraph.extractors import EXTRACTORS, get_extractor, llm_for, resolve
from trajgraph.extractors.windows import MIN_BUDGET_TOKENS
from trajgraph.graph.embedders import embedder_name
from trajgraph.pipelines import runners

C = TypeVar("C", bound="PipelineConfig")


def add_pipeline_arguments(p: argparse.ArgumentParser) -> None:
    """The flags both pipelines take, read by :meth:`PipelineConfig.checked`: declared once,
    so the batch and the stream cannot drift apart."""
    p.add_argument(
        "--extractor",
        choices=EXTRACTORS,
        default="auto",
        help="llm (OpenAI-compatible server), heuristic (offline), or auto (default): llm when "
        "TRAJGRAPH_LLM_MODEL is set, else heuristic",
    )
    p.add_argument(
        "--embedder",
        choices=(*settings_mod.EMBEDDERS, "none"),
        default=None,
        help="node embeddings: static (default, MiniLM distilled, offline), local (MiniLM, "
        "offline), openai, hash (fast, lexical) or none; overrides TRAJGRAPH_EMBEDDER",
    )
    p.add_argument(
        "--dead-letter",
        default=None,
        metavar="DIR",
        help="where rejected records and events go: a folder, local or on a filesystem every "
        "worker reaches (gs://, s3://, hdfs://; default: a new local folder per run)",
    )
    p.add_argument(
        "--tenant",
        default=None,
        help="the tenant every record or event is written to (default TRAJGRAPH_TENANT); its "
        'own "tenant" field is overridden (counted) unless --tenant-from-records',
    )
    p.add_argument(
        "--tenant-from-records",
        action="store_true",
        help='let records and events choose their tenant with their own "tenant" field '
        "(--tenant is then the tenant of those that name none); off by default, so one run "
        "writes one tenant",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        metavar="TOKENS",
        help="token budget of one window (default TRAJGRAPH_TOKEN_BUDGET or 2048)",
    )


@dataclass(frozen=True)
class PipelineConfig:
    """What the batch and the streaming pipeline both take, resolved against the settings
    and checked in one place (:meth:`checked`): how they extract and where they write. A
    variant (ingest_pipeline.IngestConfig, stream_pipeline.StreamConfig) adds its own fields
    and checks, and may complete Beam's flags further (:meth:`prepare_beam_args`)."""

    extractor: str  # heuristic | llm
    extractor_fingerprint: str  # extractor, model and prompt version: part of the manifest key
    llm: settings_mod.LLMSettings
    tenant: str
    tenant_from_records: bool
    budget_tokens: int
    batch_size: int
    neo: settings_mod.Neo4jSettings
    embedder: settings_mod.EmbedderSettings | None

    @classmethod
    def checked(
        cls: type[C], args: argparse.Namespace, settings: settings_mod.Settings, **own: Any
    ) -> C:
        """The shared flags (``--extractor``, ``--budget``, ``--tenant``,
        ``--tenant-from-records``, ``--embedder``, and ``--llm-model``, ``--batch-size`` where
        the variant has them) checked before anything runs: a bad extractor name, a missing
        model, a budget too small for a window or a tenant the contract refuses fail here,
        with a ConfigError. ``own``: the variant's fields, which it checked."""
        llm = settings.llm
        model = getattr(args, "llm_model", None)  # the stream takes the configured model
        if model:
            llm = dataclasses.replace(llm, model=model)
        llm = llm_for(args.extractor, llm, settings.local_llm)
        extractor = resolve(args.extractor, llm)
        fingerprint = get_extractor(extractor, llm=llm).fingerprint  # a missing model fails
        return cls(
            extractor=extractor,
            extractor_fingerprint=fingerprint,
            llm=llm,
            tenant=checked_tenant(args.tenant or settings.tenant),
            tenant_from_records=args.tenant_from_records,
            budget_tokens=checked_budget(args.budget or settings.token_budget),
            batch_size=getattr(args, "batch_size", None) or settings.write_batch_size,
            neo=settings.neo4j,
            embedder=embedder_for(args.embedder, settings),
            **own,
        )

    @property
    def embedder_name(self) -> str:
        return embedder_name(self.embedder) if self.embedder else ""

    def prepare_beam_args(
        self, beam_args: Sequence[str], settings: settings_mod.Settings
    ) -> list[str]:
        """Beam's flags completed for the runner they name (--runner PrismRunner: our Prism
        binary; FlinkRunner: the job server, its Java, a local cluster)."""
        return runners.prepare_beam_args(beam_args, settings)


# Walking a directory picks up the files an adapter can read; other files are not records.
LOG_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj", ".parquet")


def expand_paths(patterns: Sequence[str]) -> list[str]:
    """Globs, directories and files → a sorted list of unique files; a pattern matching nothing
    is an error (a nightly job with a typo must not look like an empty night)."""
    found: list[str] = []
    for pattern in patterns:
        local = Path(pattern)
        if local.is_file():  # the file itself, even when its name holds [ ] * or ?
            matches = [pattern]
        elif local.is_dir():
            matches = sorted(
                str(f) for f in local.rglob("*") if f.is_file() and f.name.endswith(LOG_SUFFIXES)
            )
        else:
            try:
                result = FileSystems.match([pattern])[0]
            except Exception as e:  # Beam raises BeamIOError for bad schemes and patterns
                raise InputError(f"cannot list {pattern!r}: {e}", source=pattern) from e
            matches = sorted(m.path for m in result.metadata_list)
        if not matches and local.is_dir():
            raise InputError(
                "no input files match: a folder is searched for "
                + ", ".join(f"*{s}" for s in LOG_SUFFIXES)
                + " (name other files one by one, or convert them: "
                "docs/formats.md#bring-your-own-format)",
                source=pattern,
            )
        if not matches:
            raise InputError("no input files match", source=pattern)
        found.extend(matches)
    return sorted(dict.fromkeys(found))


def checked_budget(budget: int) -> int:
    """A window's token budget, refused before anything runs when no window fits in it (batch
    and stream alike: a stream that started would dead-letter every trajectory)."""
    if budget < MIN_BUDGET_TOKENS:
        raise ConfigError(f"--budget must be at least {MIN_BUDGET_TOKENS} tokens, got {budget}")
    return budget


def checked_tenant(tenant: str) -> str:
    """The tenant a run writes to, held to the contract's rule before anything runs (else
    every record is refused, one dead letter each, for what is one setting)."""
    from trajgraph.schemas.trajectory import json_schema

    rule = json_schema()["properties"]["tenant"]
    low, high = rule["minLength"], rule["maxLength"]
    if not low <= len(tenant) <= high:
        raise ConfigError(
            f"the tenant (--tenant or TRAJGRAPH_TENANT) must be {low} to {high} characters, "
            f"got {len(tenant)}"
        )
    return tenant


def embedder_for(
    flag: str | None, settings: settings_mod.Settings
) -> settings_mod.EmbedderSettings | None:
    """The embedder of ``--embedder`` (None for ``none``), else the configured one."""
    if flag == "none":
        return None
    return dataclasses.replace(settings.embedder, kind=flag) if flag else settings.embedder


def check_graph(
    neo: settings_mod.Neo4jSettings, embedder: settings_mod.EmbedderSettings | None
) -> None:
    """Fail before reading anything when Neo4j is unreachable or its embeddings were made by
    another model, with the reason, not a Beam trace."""
    from trajgraph.graph.connection import open_driver
    from trajgraph.graph.embedders import dimension, get_embedder
    from trajgraph.graph.writer import ensure_embedding_space, ensure_schema

    driver = open_driver(neo)
    try:
        ensure_schema(driver, neo.database)
        if embedder is not None:
            emb = get_embedder(embedder)
            try:
                if embedder.kind == "static":
                    # Its table loads on first use: a damaged or unwritable one is this run's
                    # error now, not a warning per trajectory written without vectors.
                    emb.embed(["preflight"])
                ensure_embedding_space(driver, neo.database, emb.name, dimension(emb))
            finally:
                emb.close()
    finally:
        driver.close()


def space_moved(neo: settings_mod.Neo4jSettings, model: str) -> tuple[str, int] | None:
    """When `trajgraph reembed` moved the graph away from ``model`` while a run wrote vectors
    of it: the model it moved to, and how many vectors are not that model's yet (0 when the
    move remade them all). None when the graph still records ``model``."""
    from trajgraph.graph.connection import open_driver
    from trajgraph.graph.writer import embedding_space, stale_vectors

    driver = open_driver(neo)
    try:
        space = embedding_space(driver, neo.database)
        if space is None or space[0] == model:
            return None
        # A full scan, paid only in this rare case.
        return space[0], stale_vectors(driver, neo.database, *space)
    finally:
        driver.close()


def dead_letter_root(settings: settings_mod.Settings) -> Path:
    """Where a run's dead-letter folder goes when ``--dead-letter`` is not given: beside the
    local server's cache (``~/.cache/trajgraph/dead-letter/``), one new folder per run."""
    return settings.local.home.parent / "dead-letter"


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
