"""pipelines.engines without a cluster: poms, ports, config and command lines, the state
file, and the Beam flags a job on a local cluster gets (and when FlinkRunner/SparkRunner
take a running one)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trajgraph.core.errors import ConfigError, RunnerError
from trajgraph.core.process import command_line
from trajgraph.core.settings import LocalServerSettings, Settings
from trajgraph.pipelines import runners
from trajgraph.pipelines.engines import cluster, control, flags, flink, spark
from trajgraph.pipelines.engines.layout import Ports, paths
from trajgraph.pipelines.engines.members import ClusterSpec
from trajgraph.pipelines.engines.versions import BEAM, FLINK_JARS, SPARK_JARS


def _settings(tmp_path: Path) -> Settings:
    return Settings(local=LocalServerSettings(home=tmp_path / "cache" / "neo4j"))


def _spec(tmp_path: Path, engine: str, members: int = 2) -> ClusterSpec:
    return ClusterSpec(
        engine=engine,
        members=members,
        ports=Ports(19000),
        paths=paths(_settings(tmp_path), engine),
        java=Path("/usr/bin/java"),
        boot=tmp_path / "boot",
        worker_env={"PATH": "/venv/bin:/usr/bin", "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT": "1"},
    )


def test_poms_pin_what_the_job_servers_need() -> None:
    flink_pom, spark_pom = FLINK_JARS.pom(), SPARK_JARS.pom()
    assert f"<artifactId>beam-runners-flink-1.19</artifactId><version>{BEAM}</version>" in flink_pom
    assert "slf4j-simple" in flink_pom  # else Flink logs nothing
    assert (
        "<artifactId>jackson-bom</artifactId><version>2.15.2</version><type>pom</type>" in spark_pom
    )
    assert "<artifactId>spark-core_2.12</artifactId><version>3.5.0</version>" in spark_pom
    assert FLINK_JARS.coords == f"org.apache.beam:beam-runners-flink-1.19:{BEAM}"


def test_ports_follow_the_base() -> None:
    p = Ports(19000)
    assert (p.job, p.artifact, p.expansion, p.master, p.web, p.blob) == tuple(range(19000, 19006))
    assert [p.member(i) for i in range(3)] == [19010, 19012, 19014]
    assert p.last(2) == 19013


def test_flink_members_bind_the_loopback_and_carry_their_markers(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "flink", members=3)
    conf = flink.flink_conf(spec)
    for line in ("rest.bind-address: 127.0.0.1", "taskmanager.bind-host: 127.0.0.1",
                 "parallelism.default: 3", "taskmanager.memory.network.min: 256m",
                 "taskmanager.cpu.cores: 1.0"):  # fmt: skip
        assert line in conf
    jm, tms, server = flink.phases(spec)
    assert [m.role for m in tms] == ["taskmanager-1", "taskmanager-2", "taskmanager-3"]
    for m in [*jm, *tms, *server]:
        assert all(marker in m.command for marker in m.markers)
    assert tms[0].launch_command()[:2] == ["env", "PATH=/venv/bin:/usr/bin"]
    assert "taskmanager.rpc.port=19010" in tms[0].command
    assert "--flink-master=127.0.0.1:19004" in server[0].command


def test_spark_workers_get_a_spark_home_and_the_workers_python(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "spark")
    spark.write_config(spec)
    home = spark.spark_home(spec)
    assert (home / "RELEASE").is_file() and os.readlink(home / "jars") == str(spec.paths.lib_dir)
    _master, workers, server = spark.phases(spec)
    assert workers[1].command[-1] == "spark://127.0.0.1:19003"
    assert workers[0].env["SPARK_SCALA_VERSION"] == "2.12"
    assert workers[0].env["PATH"].startswith("/venv/bin:")
    assert "--spark-master-url=spark://127.0.0.1:19003" in server[0].command
    assert "-Dspark.driver.bindAddress=127.0.0.1" in server[0].command


def _running_state(tmp_path: Path, engine: str) -> cluster.ClusterState:
    """A state file whose one member is this test process (alive, and its command line
    holds the markers)."""
    p = paths(_settings(tmp_path), engine)
    p.run_dir.mkdir(parents=True)
    own = command_line(os.getpid())
    assert own is not None
    me = cluster.MemberState("jobserver", "job server", (own[0],), 19000, "log")
    state = cluster.ClusterState(
        engine=engine, beam_version=BEAM, members=2, base_port=19000,
        job_endpoint="127.0.0.1:19000", web="http://127.0.0.1:19004", boot="/b/boot",
        python_bin="/venv/bin", processes=(me,), ready=True,
    )  # fmt: skip
    cluster._write_state(p, state)
    (p.run_dir / "jobserver").mkdir()
    (p.run_dir / "jobserver" / "pid").write_text(f"{os.getpid()}\n")
    return state


def test_ingest_flags_name_the_job_server_and_process_workers(tmp_path: Path) -> None:
    state = _running_state(tmp_path, "flink")
    got = flags.ingest_flags(state, portable=True)
    assert got[:3] == ["--runner=PortableRunner", "--job_endpoint=127.0.0.1:19000",
                       "--environment_type=PROCESS"]  # fmt: skip
    config = got[3].split("=", 1)[1]
    assert json.loads(config) == {"command": "/b/boot"}
    assert '\'--environment_config={"command": "/b/boot"}\'' in flags.shell_flags(state)


def test_flink_and_spark_runners_take_a_running_local_cluster(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    for engine, runner in (("flink", "FlinkRunner"), ("spark", "SparkRunner")):
        _running_state(tmp_path, engine)
        p = paths(settings, engine)
        assert cluster.status(p, engine) is not None
        out = flags.prepare(engine, p, ["runner"], beam_version=BEAM)
        assert out is not None and "--job_endpoint=127.0.0.1:19000" in out
        # A place the user chose wins.
        assert flags.prepare(engine, p, ["runner", "job_endpoint"], beam_version=BEAM) is None
        assert flags.prepare(engine, p, ["environment_type"], beam_version=BEAM) is None
        with pytest.raises(RunnerError, match=r"apache-beam 9\.9\.9.*\.venv-cluster"):
            flags.prepare(engine, p, ["runner"], beam_version="9.9.9")
        argv = ["--runner", runner]
        if runners.BEAM_VERSION == BEAM:
            assert "--environment_type=PROCESS" in runners.prepare_beam_args(argv, settings)
        else:
            with pytest.raises(RunnerError, match="job server only runs jobs of its own version"):
                runners.prepare_beam_args(argv, settings)


def test_no_state_file_means_no_cluster(tmp_path: Path) -> None:
    p = paths(_settings(tmp_path), "spark")
    assert cluster.status(p, "spark") is None
    assert flags.prepare("spark", p, ["runner"], beam_version=BEAM) is None
    assert cluster.stop(p, "spark") == 0


def test_a_job_endpoint_keeps_beams_auto_master() -> None:
    got = runners.flink_defaults(
        runners.parse_flags(["--job_endpoint=h:1", "--environment_type=PROCESS"]),
        jar=None,
        java=None,
    )
    assert not any(a.startswith("--flink_master") for a in got)


def test_sizes_and_versions_are_checked() -> None:
    with pytest.raises(ConfigError, match="1 to 16"):
        control.check_engine("flink", 0)
    with pytest.raises(ConfigError, match="unknown engine"):
        control.check_engine("storm", 2)
    with pytest.raises(RunnerError, match=r"\.venv-cluster"):
        control.check_beam("2.78.0")
    control.check_beam(BEAM)


@pytest.mark.parametrize(
    ("beam_args", "absolute"),
    [
        ([], False),  # the DirectRunner: the workers share this working directory
        (["--runner=PortableRunner", "--environment_type=PROCESS"], True),
        (["--runner=FlinkRunner", "--environment_type=EXTERNAL"], True),
    ],
)
def test_workers_elsewhere_get_local_paths_absolute(
    monkeypatch: pytest.MonkeyPatch, beam_args: list[str], absolute: bool
) -> None:
    """A TaskManager's SDK worker opens the files from its own working directory: a relative
    path given on the command line would be a dead letter there."""
    from trajgraph.pipelines import ingest_pipeline

    seen: dict[str, object] = {}

    def build(_p: object, _config: object, **kw: object) -> None:
        seen.update(kw)

    monkeypatch.setattr(ingest_pipeline, "build_pipeline", build)
    monkeypatch.setattr(ingest_pipeline.launch, "execute", lambda make, _args: make(None))
    ingest_pipeline.run_pipeline(
        None,  # type: ignore[arg-type]
        beam_args,
        paths=["logs/a.jsonl", "gs://bucket/b.jsonl"],
        dead_letter_prefix="dl/dead-letter",
        retry_prefix="dl/retry",
    )
    here = os.getcwd()
    if absolute:
        assert seen["paths"] == [f"{here}/logs/a.jsonl", "gs://bucket/b.jsonl"]
        assert seen["dead_letter_prefix"] == f"{here}/dl/dead-letter"
        assert seen["retry_prefix"] == f"{here}/dl/retry"
    else:
        assert seen["paths"] == ["logs/a.jsonl", "gs://bucket/b.jsonl"]
        assert seen["dead_letter_prefix"] == "dl/dead-letter"
