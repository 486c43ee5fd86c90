"""One pipeline core, two thin variants: how every run of a pipeline goes, batch or stream.

A run parses trajgraph's flags with ``parse_known_args`` (the rest are Beam's), checks its
configuration (preflight.PipelineConfig) and the graph before Beam starts, completes
Beam's flags for the runner, builds the pipeline, runs it and waits. The batch pipeline
(ingest_pipeline.py) and the stream (stream_pipeline.py) are variants, as Beam's textio.py
keeps one core under its reads: each brings its parser, its configuration class and its
``launch`` (how its pipeline is built from the checked configuration); the jobs
(trajgraph/jobs) take :func:`ready` and the variants' ``run_pipeline`` around their own
bookkeeping.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import GraphError, one_line
from trajgraph.pipelines import progress
from trajgraph.pipelines.preflight import PipelineConfig, check_graph, space_moved

C = TypeVar("C", bound=PipelineConfig)

log = logging.getLogger(__name__)


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A pipeline's parser: trajgraph's flags are added to it, and what it does not know
    goes to Beam (:func:`run` parses with ``parse_known_args``), as its help says."""
    return argparse.ArgumentParser(
        prog=prog,
        description=f"{description} Unknown flags go to Beam, e.g. --runner, --direct_num_workers.",
    )


def ready(
    config: PipelineConfig, beam_args: Sequence[str], settings: settings_mod.Settings
) -> list[str]:
    """Fail before reading anything when the graph cannot take the run (preflight.check_graph);
    Beam's flags completed for the runner (the variant's ``prepare_beam_args``)."""
    check_graph(config.neo, config.embedder)
    return config.prepare_beam_args(beam_args, settings)


def execute(
    build: Callable[[beam.Pipeline], None], beam_args: Sequence[str], *, streaming: bool = False
) -> PipelineResult:
    """Build the pipeline with Beam's flags (``build`` composes it), run it and wait: Beam's
    result, or what a step raised. A stream interrupted by Ctrl-C while it waits is
    cancelled and its result returned; a batch run's interruption is raised."""
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    options = PipelineOptions(list(beam_args))
    if streaming:
        options.view_as(StandardOptions).streaming = True
    progress.reset()
    p = beam.Pipeline(options=options)
    build(p)
    result = p.run()
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        if not streaming:
            raise
        result.cancel()
    return result


def run(
    argv: Sequence[str] | None,
    settings: settings_mod.Settings | None,
    *,
    parser: argparse.ArgumentParser,
    configure: Callable[[argparse.Namespace, settings_mod.Settings], C],
    launch: Callable[[C, list[str], argparse.Namespace, settings_mod.Settings], PipelineResult],
) -> PipelineResult:
    """The one ``run`` of both pipelines: parse trajgraph's flags (the rest are Beam's),
    check the configuration, the inputs and the graph, then ``launch`` the variant."""
    args, beam_args = parser.parse_known_args(argv)
    settings = settings or settings_mod.load()
    config = configure(args, settings)
    return launch(config, ready(config, beam_args, settings), args, settings)


def moved_during(config: PipelineConfig, counters: Mapping[str, Any]) -> tuple[str, int] | None:
    """After a run that wrote vectors: the model `trajgraph reembed` moved the graph to
    meanwhile, and how many vectors are not that model's yet (preflight.space_moved); None
    when it did not move, or when Neo4j cannot say."""
    wrote_vectors = counters.get("embedded") or counters.get("embeddings_reused")
    if config.embedder is None or not wrote_vectors:
        return None
    try:
        return space_moved(config.neo, config.embedder_name)
    except GraphError as e:
        # Everything is written: a Neo4j lost now must not fail the run (nor keep a manifest
        # from recording it). The next run's preflight sees a move.
        log.warning(
            "could not check whether `trajgraph reembed` moved the graph during this run: %s",
            one_line(e),
        )
        return None
