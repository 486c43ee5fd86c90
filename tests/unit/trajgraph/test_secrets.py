"""Secrets never travel in the job graph: the Neo4j password and the OpenAI key are pickled as
where they were read, and read again where they are unpickled (a Beam worker)."""

from __future__ import annotations

import base64
import binascii
import bz2
import contextlib
import dataclasses
import pickle
import zlib
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

from tests import memfs
from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError, LLMError
from trajgraph.core.settings import Secret
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient
from trajgraph.graph.connection import open_driver
from trajgraph.pipelines import ingest_pipeline as ingest
from trajgraph.pipelines import stream_pipeline as stream

PASSWORD = "pw-7c1f0e9a-neo4j"
KEY = "sk-test-4b2d8e61-openai"


def _env(**more: str) -> dict[str, str]:
    return {
        "NEO4J_URI": "bolt://neo4j.example.invalid:7687",
        "NEO4J_PASSWORD": PASSWORD,
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "TRAJGRAPH_LLM_MODEL": "gpt-test",
        "TRAJGRAPH_EMBEDDER": "openai",
        "TRAJGRAPH_EMBED_DIM": "64",
        **more,
    }


def _source(value: str | None) -> str:
    assert isinstance(value, Secret)
    return value.source


def test_a_secret_pickles_as_its_source_and_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = settings_mod.load(_env())
    assert s.neo4j.password == PASSWORD and isinstance(s.neo4j.password, Secret)
    assert s.neo4j.password.source == "env:NEO4J_PASSWORD"
    assert s.llm.api_key == KEY and s.embedder.transport.api_key == KEY
    for obj in (s.neo4j, s.llm, s.embedder, s):
        for dump in (pickle.dumps(obj), pickler.dumps(obj)):
            assert PASSWORD.encode() not in _decoded(dump)
            assert KEY.encode() not in _decoded(dump)
    assert PASSWORD not in repr(s.neo4j.password) and "NEO4J_PASSWORD" in repr(s.neo4j.password)
    # Where it is unpickled, it is read from that machine's environment.
    monkeypatch.setenv("NEO4J_PASSWORD", "the-workers-own")
    monkeypatch.setenv("OPENAI_API_KEY", "the-workers-key")
    again = pickle.loads(pickle.dumps(s))
    assert again.neo4j.password == "the-workers-own" and again.llm.api_key == "the-workers-key"
    assert again.neo4j.uri == s.neo4j.uri  # the rest travels as it was
    # A worker without it learns what is missing, from the driver and the client.
    monkeypatch.delenv("NEO4J_PASSWORD")
    monkeypatch.delenv("OPENAI_API_KEY")
    lost = pickle.loads(pickle.dumps(s))
    assert lost.neo4j.password == "" and "NEO4J_PASSWORD is not set" in lost.neo4j.password.missing
    with pytest.raises(ConfigError, match="NEO4J_PASSWORD is not set in this worker's environ"):
        open_driver(lost.neo4j)
    with pytest.raises(LLMError, match="OPENAI_API_KEY is not set in this worker's environment"):
        ChatClient(lost.llm, Stats())


def test_secret_sources_uri_file_and_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "neo4j-password"
    secret.write_text(PASSWORD + "\n")
    s = settings_mod.load({"NEO4J_PASSWORD_FILE": str(secret), "OPENAI_API_KEY_FILE": str(secret)})
    assert s.neo4j.password == PASSWORD and _source(s.neo4j.password) == f"file:{secret}"
    assert s.llm.api_key == PASSWORD
    secret.write_text("rotated")  # a worker reads the file it finds
    assert pickle.loads(pickle.dumps(s.neo4j)).password == "rotated"
    # The precedence: the URI's userinfo, NEO4J_PASSWORD, the file, the default.
    both = settings_mod.load({"NEO4J_PASSWORD": "env-one", "NEO4J_PASSWORD_FILE": str(secret)})
    assert both.neo4j.password == "env-one"
    uri = settings_mod.load({"NEO4J_URI": "bolt://u:in-uri@h:1", "NEO4J_PASSWORD": "env-one"})
    assert uri.neo4j.password == "in-uri" and _source(uri.neo4j.password) == "uri:NEO4J_URI"
    monkeypatch.setenv("NEO4J_URI", "bolt://u:workers-uri@h:1")
    assert pickle.loads(pickle.dumps(uri.neo4j.password)) == "workers-uri"
    default = settings_mod.load({})
    assert default.neo4j.password == "trajgraph-local" and default.llm.api_key is None
    monkeypatch.setenv("NEO4J_PASSWORD", "not-used")  # the launcher used the default
    assert pickle.loads(pickle.dumps(default.neo4j.password)) == "trajgraph-local"
    with pytest.raises(ConfigError, match="NEO4J_PASSWORD_FILE: cannot read /no/such/file"):
        settings_mod.load({"NEO4J_PASSWORD_FILE": "/no/such/file"})


def test_a_secret_file_on_a_beam_filesystem() -> None:
    path = f"{memfs.PREFIX}secrets-{id(object())}/openai-key"
    memfs.put(path, KEY.encode() + b"\n")
    try:
        s = settings_mod.load({"OPENAI_API_KEY_FILE": path})
        assert s.llm.api_key == KEY
        memfs.put(path, b"rotated-key")
        assert pickle.loads(pickle.dumps(s.llm)).api_key == "rotated-key"
    finally:
        memfs.clear(path)
    lost = pickle.loads(pickle.dumps(s.llm))  # the file is gone on this "worker"
    assert lost.api_key == "" and "cannot read the secret file" in lost.api_key.missing


# ------------------------------------------------------------------ the job graph


def _decoded(payload: bytes) -> bytes:
    """A payload and what it holds: Beam stores pickled functions base64-encoded and bz2- or
    zlib-compressed."""
    out = [payload]
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raw = payload
    for unpack in (bz2.decompress, zlib.decompress):
        with contextlib.suppress(OSError, ValueError, zlib.error):
            out.append(unpack(raw))
    return b"\x00".join(out)


def _payloads(p: beam.Pipeline) -> Iterator[bytes]:
    """Every byte string of the pipeline proto that a runner receives, decoded."""
    proto = p.to_runner_api()
    yield proto.SerializeToString()
    for t in proto.components.transforms.values():
        yield _decoded(t.spec.payload)
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            pardo = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            yield _decoded(pardo.do_fn.payload)
    for c in proto.components.coders.values():
        yield _decoded(c.spec.payload)
    for w in proto.components.windowing_strategies.values():
        yield _decoded(w.window_fn.payload)


def _ingest_pipeline(s: settings_mod.Settings, tmp_path: Path) -> beam.Pipeline:
    logs = tmp_path / "a.jsonl"
    logs.write_text("{}\n")
    args, _ = ingest.build_parser().parse_known_args([str(logs), "--extractor", "llm"])
    config = ingest.IngestConfig.from_args(args, s)
    p = beam.Pipeline()
    ingest.build_pipeline(
        p, config, paths=[str(logs)], dead_letter_prefix=str(tmp_path / "dl"), retry_prefix="r"
    )
    return p


def _stream_pipeline(s: settings_mod.Settings, tmp_path: Path) -> beam.Pipeline:
    args = stream.build_parser().parse_args([str(tmp_path), "--extractor", "llm"])
    p = beam.Pipeline()
    stream.build_pipeline(p, stream.StreamConfig.from_args(args, s), stop_at=1.0)
    return p


@pytest.mark.parametrize("build", [_ingest_pipeline, _stream_pipeline])
def test_the_job_graph_holds_no_secret(build: object, tmp_path: Path) -> None:
    s = settings_mod.load(_env())
    payloads = b"\x00".join(_payloads(build(s, tmp_path)))  # type: ignore[operator]
    assert b"neo4j.example.invalid" in payloads  # the settings are in there...
    assert b"gpt-test" in payloads
    assert PASSWORD.encode() not in payloads  # ...their secrets are not
    assert KEY.encode() not in payloads
    # The check can see a secret: one given as a plain string travels as one.
    plain = dataclasses.replace(s, neo4j=dataclasses.replace(s.neo4j, password=f"plain-{PASSWORD}"))
    assert f"plain-{PASSWORD}".encode() in b"\x00".join(_payloads(build(plain, tmp_path)))  # type: ignore[operator]
