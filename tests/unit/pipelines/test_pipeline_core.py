"""One pipeline core, two thin variants (issue 41): the batch and the streaming pipeline take
their shared flags through one check (preflight.PipelineConfig), run through one ``run``
(pipelines/launch.py) and open the graph through one writer setup (transforms.GraphWriterFn)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import StandardOptions

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError, GraphError
from trajgraph.pipelines import ingest_pipeline as batch
from trajgraph.pipelines import launch
from trajgraph.pipelines import stream_pipeline as stream
from trajgraph.pipelines.preflight import PipelineConfig
from trajgraph.pipelines.stream_transforms import WriteNewestVersionFn
from trajgraph.pipelines.transforms import GraphWriterFn, WriteGraphFn

SHARED = [f.name for f in dataclasses.fields(PipelineConfig)]


def _configs(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> list[Any]:
    (tmp_path / "a.jsonl").write_text("{}\n")
    settings = settings_mod.load(env or {})
    argv = [str(tmp_path), *flags]
    return [
        batch.IngestConfig.from_args(batch.build_parser().parse_args(argv), settings),
        stream.StreamConfig.from_args(stream.build_parser().parse_args(argv), settings),
    ]


def test_batch_and_stream_resolve_the_flags_they_share_alike(tmp_path: Path) -> None:
    flags = ("--extractor", "heuristic", "--budget", "512", "--tenant", "team-a")
    ingest_config, stream_config = _configs(tmp_path, *flags, "--embedder", "none")
    assert isinstance(ingest_config, batch.IngestConfig)
    assert isinstance(stream_config, stream.StreamConfig)
    assert isinstance(ingest_config, PipelineConfig) and isinstance(stream_config, PipelineConfig)
    assert {k: getattr(ingest_config, k) for k in SHARED} == {
        k: getattr(stream_config, k) for k in SHARED
    }
    assert (ingest_config.budget_tokens, ingest_config.tenant) == (512, "team-a")
    assert ingest_config.embedder is None and ingest_config.embedder_name == ""
    assert ingest_config.paths == (str(tmp_path / "a.jsonl"),)  # the batch's own field
    # Settings too: both read TRAJGRAPH_TENANT and the write batch size from one place.
    env = {"TRAJGRAPH_TENANT": "from-env", "TRAJGRAPH_WRITE_BATCH": "77"}
    ingest_config, stream_config = _configs(tmp_path, "--extractor", "heuristic", env=env)
    assert (ingest_config.tenant, stream_config.tenant) == ("from-env", "from-env")
    assert (ingest_config.batch_size, stream_config.batch_size) == (77, 77)


@pytest.mark.parametrize(
    "flags",
    [["--budget", "10"], ["--tenant", "t" * 129], ["--extractor", "llm"]],
)
def test_batch_and_stream_refuse_the_same_shared_flags_with_the_same_words(
    flags: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAJGRAPH_LLM_MODEL", raising=False)
    (tmp_path / "a.jsonl").write_text("{}\n")
    # No model and no local server: --extractor llm is a missing model.
    settings = dataclasses.replace(
        settings_mod.load({}),
        local_llm=dataclasses.replace(settings_mod.load({}).local_llm, run_dir=tmp_path / "no"),
    )
    argv = [str(tmp_path), "--extractor", "heuristic", *flags]
    said = []
    for module, config in ((batch, batch.IngestConfig), (stream, stream.StreamConfig)):
        with pytest.raises(ConfigError) as e:
            config.from_args(module.build_parser().parse_args(argv), settings)
        said.append(str(e.value))
    assert said[0] == said[1]


class _Built(Exception):
    pass


@pytest.mark.parametrize("streaming", [False, True])
def test_execute_builds_in_the_variants_mode(streaming: bool) -> None:
    seen: list[bool] = []

    def build(p: beam.Pipeline) -> None:
        seen.append(p.options.view_as(StandardOptions).streaming)
        raise _Built  # what a step raised comes back as it is; nothing runs

    with pytest.raises(_Built):
        launch.execute(build, [], streaming=streaming)
    assert seen == [streaming]


def test_run_checks_the_configuration_before_the_graph_and_launches_with_beams_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[Any] = []
    monkeypatch.setattr(launch, "check_graph", lambda neo, emb: checked.append((neo, emb)))
    launched: list[Any] = []

    def go(config: Any, beam_args: list[str], args: argparse.Namespace, settings: Any) -> Any:
        launched.append((config, beam_args, args.extractor))
        return "result"

    parser = batch.build_parser()
    (tmp_path / "a.jsonl").write_text("{}\n")
    argv = [str(tmp_path), "--extractor", "heuristic", "--direct_num_workers", "2"]
    settings = settings_mod.load({})
    out = launch.run(
        argv, settings, parser=parser, configure=batch.IngestConfig.from_args, launch=go
    )
    assert out == "result"
    assert len(checked) == 1 and checked[0][0] == settings.neo4j
    config, beam_args, extractor = launched[0]
    assert isinstance(config, batch.IngestConfig) and extractor == "heuristic"
    assert beam_args == ["--direct_num_workers", "2"]  # Beam's flags, untouched by ours
    with pytest.raises(ConfigError, match="--budget"):
        launch.run(
            [*argv, "--budget", "1"],
            settings,
            parser=parser,
            configure=batch.IngestConfig.from_args,
            launch=go,
        )
    assert len(checked) == 1  # a bad flag never reaches the graph


class _Driver:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("fn_class", [WriteGraphFn, WriteNewestVersionFn])
def test_both_graph_writers_open_the_graph_through_one_setup(
    fn_class: type[GraphWriterFn], monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajgraph.graph import connection, writer

    drivers: list[_Driver] = []
    schemas: list[Any] = []

    def open_driver(neo: Any) -> _Driver:
        drivers.append(_Driver())
        return drivers[-1]

    monkeypatch.setattr(connection, "open_driver", open_driver)
    monkeypatch.setattr(writer, "ensure_schema", lambda d, db: schemas.append((d, db)))
    neo = settings_mod.load({}).neo4j
    fn = fn_class(neo, 7)
    assert isinstance(fn, GraphWriterFn)
    fn.setup()
    assert schemas == [(drivers[0], neo.database)]
    assert isinstance(fn._writer, writer.GraphWriter) and fn._writer._batch_size == 7
    fn.teardown()
    assert drivers[0].closed


def test_the_after_run_reembed_check_only_informs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_mod.load({})
    config = PipelineConfig(
        extractor="heuristic",
        extractor_fingerprint="h",
        llm=settings.llm,
        tenant="t",
        tenant_from_records=False,
        budget_tokens=512,
        batch_size=10,
        neo=settings.neo4j,
        embedder=dataclasses.replace(settings.embedder, kind="hash"),
    )
    asked: list[str] = []

    def lost(neo: Any, model: str) -> Any:
        asked.append(model)
        raise GraphError("Neo4j is gone")

    monkeypatch.setattr(launch, "space_moved", lost)
    assert launch.moved_during(config, {"embedded": 0}) is None and asked == []  # no vectors
    with caplog.at_level(logging.WARNING, logger="trajgraph.pipelines.launch"):
        assert launch.moved_during(config, {"embedded": 3}) is None
    assert asked == [config.embedder_name] and "Neo4j is gone" in caplog.text
    monkeypatch.setattr(launch, "space_moved", lambda neo, model: ("other-8", 4))
    assert launch.moved_during(config, {"embeddings_reused": 1}) == ("other-8", 4)


def test_batch_and_stream_declare_the_flags_they_share_once() -> None:
    from trajgraph.pipelines.preflight import add_pipeline_arguments

    shared = argparse.ArgumentParser()
    add_pipeline_arguments(shared)

    def described(parser: argparse.ArgumentParser) -> dict[str, tuple[Any, ...]]:
        return {
            a.dest: (tuple(a.option_strings), a.default, a.choices, a.type, a.help)
            for a in parser._actions
        }

    want = {k: v for k, v in described(shared).items() if k != "help"}
    assert {"extractor", "budget", "tenant", "tenant_from_records", "embedder"} <= set(want)
    for parser in (batch.build_parser(), stream.build_parser()):
        have = described(parser)
        assert {k: have.get(k) for k in want} == want
