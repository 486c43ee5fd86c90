"""pipelines.runners without Flink: flag defaults and overrides, the jar fetch, Java checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import FlinkRunnerOptions, PipelineOptions

from tests.fake_exe import fake_exe
from trajgraph.core.errors import ConfigError, RunnerError
from trajgraph.core.settings import LocalServerSettings, Settings
from trajgraph.pipelines import prism, runners

BEAM = runners.BEAM_VERSION
COORDS = f"org.apache.beam:beam-runners-flink-{runners.DEFAULT_FLINK_VERSION}-job-server:{BEAM}"

# A Maven that copies a fake jar to -DoutputDirectory and counts its calls.
GOOD_MVN = """
echo call >> "$(dirname "$0")/calls"
for a in "$@"; do
  case "$a" in
    -Dartifact=*) coords="${a#-Dartifact=}" ;;
    -DoutputDirectory=*) out="${a#-DoutputDirectory=}" ;;
  esac
done
artifact=$(echo "$coords" | cut -d: -f2); version=$(echo "$coords" | cut -d: -f3)
mkdir -p "$out" && echo jar > "$out/$artifact-$version.jar"
"""
# What Maven 3.8 prints when Central does not serve the artifact.
MISSING_MVN = """
echo "[INFO] Scanning for projects..."
echo "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-dependency-plugin:2.8:copy \
(default-cli) on project standalone-pom: Unable to find artifact. Could not find artifact \
org.apache.beam:x:jar:1 in central (https://repo.maven.apache.org/maven2)"
echo "[ERROR]   central (https://repo.maven.apache.org/maven2, releases=true, snapshots=false)"
exit 1
"""


def _java_home(tmp_path: Path, version: str) -> Path:
    home = tmp_path / f"jdk{version}"
    fake_exe(home / "bin", "java", f"echo 'openjdk version \"{version}\" 2025-01-01' >&2\n")
    return home


def _settings(tmp_path: Path, java: str = "17.0.15") -> Settings:
    local = LocalServerSettings(
        home=tmp_path / "cache" / "neo4j", java_home=_java_home(tmp_path, java)
    )
    return Settings(local=local)


def _flink_args(extra: list[str], jar: str | None, java: str | None) -> list[str]:
    return runners.flink_defaults(runners.parse_flags(extra), jar=jar, java=java)


# ------------------------------------------------------------------ flags


def test_flink_runner_names() -> None:
    for name in (
        "FlinkRunner",
        "flink",
        "flinkrunner",
        "FLINK",
        "apache_beam.runners.portability.flink_runner.FlinkRunner",
    ):
        assert runners.is_flink(name), name
    for other in (None, "", "DirectRunner", "PortableRunner", "SparkRunner", "DataflowRunner"):
        assert not runners.is_flink(other), other


def test_parse_flags_both_spellings() -> None:
    f = runners.parse_flags(
        ["--runner=FlinkRunner", "--flink_master", "host:8081", "--other", "x", "--x=1"]
    )
    assert (f.runner, f.flink_master, f.environment_type) == ("FlinkRunner", "host:8081", None)
    assert not f.flink_submit_uber_jar
    # No abbreviations: --flink_m is not --flink_master (Beam would not read it either).
    assert runners.parse_flags(["--flink_m", "x"]).flink_master is None


def test_defaults_when_nothing_is_given() -> None:
    assert _flink_args(["--runner", "FlinkRunner"], "/c/job.jar", "/usr/bin/java") == [
        "--flink_master=[local]",
        "--environment_type=LOOPBACK",
        "--flink_job_server_jar=/c/job.jar",
        "--job_server_java_launcher=/usr/bin/java",
    ]


def test_user_flags_win() -> None:
    given = [
        "--runner=FlinkRunner",
        "--flink_master=[auto]",
        "--environment_type=PROCESS",
        "--flink_job_server_jar=/mine.jar",
        "--job_server_java_launcher=/opt/java",
    ]
    assert _flink_args(given, "/c/job.jar", "/usr/bin/java") == []


def test_local_master_gets_loopback_remote_does_not() -> None:
    assert _flink_args(["--flink_master", "[auto]"], None, None) == ["--environment_type=LOOPBACK"]
    # Task managers elsewhere cannot call back into this process: Beam's default applies.
    assert _flink_args(["--flink_master", "http://flink:8081"], None, None) == []


def test_other_runners_pass_through_untouched(tmp_path: Path) -> None:
    mvn = fake_exe(tmp_path / "bin", "mvn", "exit 9\n")
    for argv in ([], ["--runner", "DirectRunner", "--direct_num_workers", "2"], ["--x"]):
        assert runners.prepare_beam_args(argv, _settings(tmp_path), mvn=str(mvn)) == argv
    assert not (tmp_path / "bin" / "calls").exists()


def test_unknown_flink_version_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--flink_version '1\.2'.*" + runners.FLINK_VERSIONS[0]):
        runners.prepare_beam_args(
            ["--runner", "FlinkRunner", "--flink_version", "1.2"], _settings(tmp_path)
        )


def test_default_flink_version_is_beams_newest_published() -> None:
    beam_default = PipelineOptions([]).view_as(FlinkRunnerOptions).flink_version
    assert beam_default == runners.DEFAULT_FLINK_VERSION
    assert runners.job_server_coordinates("2.0", "2.77.0") == (
        "org.apache.beam:beam-runners-flink-2.0-job-server:2.77.0"
    )


# ------------------------------------------------------------------ fetch


def test_fetch_once_into_the_cache_then_reuse(tmp_path: Path) -> None:
    mvn = fake_exe(tmp_path / "bin", "mvn", GOOD_MVN)
    settings = _settings(tmp_path)
    logs: list[str] = []
    out = runners.prepare_beam_args(
        ["--runner", "FlinkRunner"], settings, mvn=str(mvn), log=logs.append
    )
    jar = tmp_path / "cache" / "beam" / BEAM / f"{COORDS.split(':')[1]}-{BEAM}.jar"
    assert jar.is_file()
    assert f"--flink_job_server_jar={jar}" in out
    assert f"--job_server_java_launcher={tmp_path / 'jdk17.0.15' / 'bin' / 'java'}" in out
    assert "--flink_master=[local]" in out and "--environment_type=LOOPBACK" in out
    assert any(COORDS in m for m in logs)
    assert not [p for p in jar.parent.iterdir() if p.name.endswith(".partial")]
    # Cached: the second run does not call Maven.
    again = runners.prepare_beam_args(["--runner", "FlinkRunner"], settings, mvn=str(mvn))
    assert again == out
    assert (tmp_path / "bin" / "calls").read_text().count("call") == 1


def test_jar_cache_dir_flag_is_the_cache(tmp_path: Path) -> None:
    mvn = fake_exe(tmp_path / "bin", "mvn", GOOD_MVN)
    cache = tmp_path / "elsewhere"
    out = runners.prepare_beam_args(
        ["--runner", "flink", f"--jar_cache_dir={cache}"], _settings(tmp_path), mvn=str(mvn)
    )
    assert any(a.startswith(f"--flink_job_server_jar={cache}/") for a in out)


def test_fetch_failure_names_coordinates_repository_and_remedies(tmp_path: Path) -> None:
    mvn = fake_exe(tmp_path / "bin", "mvn", MISSING_MVN)
    with pytest.raises(RunnerError) as info:
        runners.prepare_beam_args(["--runner", "FlinkRunner"], _settings(tmp_path), mvn=str(mvn))
    msg = str(info.value)
    assert COORDS in msg
    assert "from central (https://repo.maven.apache.org/maven2):" in msg
    assert "Could not find artifact" in msg and "mvn exit 1" in msg
    assert "--flink_job_server_jar" in msg and "settings.xml" in msg
    cache = tmp_path / "cache" / "beam" / BEAM
    assert not [p for p in cache.iterdir() if p.suffix == ".jar" or p.name.endswith(".partial")]


def test_fetch_without_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(RunnerError, match=r"(?s)beam-runners-flink.*apt-get install maven"):
        runners.ensure_job_server_jar(COORDS, tmp_path / "cache")


def test_given_jar_or_endpoint_needs_no_fetch(tmp_path: Path) -> None:
    mvn = fake_exe(tmp_path / "bin", "mvn", "exit 9\n")
    jar = tmp_path / "mine.jar"
    jar.write_text("jar")
    settings = _settings(tmp_path)
    out = runners.prepare_beam_args(
        ["--runner", "FlinkRunner", "--flink_job_server_jar", str(jar)], settings, mvn=str(mvn)
    )
    assert [a for a in out if "flink_job_server_jar" in a] == ["--flink_job_server_jar"]
    with pytest.raises(RunnerError, match="is not a file"):
        runners.prepare_beam_args(
            ["--runner", "FlinkRunner", f"--flink_job_server_jar={tmp_path / 'no.jar'}"],
            settings,
            mvn=str(mvn),
        )
    # Someone else's job server: no jar, no Java, no master default needed beyond Beam's.
    out = runners.prepare_beam_args(
        ["--runner", "FlinkRunner", "--job_endpoint", "localhost:8099"],
        _settings(tmp_path, java="25"),
        mvn=str(mvn),
    )
    assert not any("jar" in a or "java" in a for a in out)
    assert not (tmp_path / "bin" / "calls").exists()


# ------------------------------------------------------------------ Java


def test_java_outside_the_job_servers_range_is_refused(tmp_path: Path) -> None:
    mvn = fake_exe(tmp_path / "bin", "mvn", GOOD_MVN)
    for version in ("1.8.0_292", "25"):
        with pytest.raises(RunnerError, match=r"needs Java 11 to 21.*--job_server_java"):
            runners.prepare_beam_args(
                ["--runner", "FlinkRunner"], _settings(tmp_path, java=version), mvn=str(mvn)
            )
    # Java is checked before anything is downloaded.
    assert not (tmp_path / "bin" / "calls").exists()
    out = runners.prepare_beam_args(
        ["--runner", "FlinkRunner"], _settings(tmp_path, java="21.0.2"), mvn=str(mvn)
    )
    assert any(a.endswith("jdk21.0.2/bin/java") for a in out)


# ------------------------------------------------------------------ Prism


def _prism_settings(tmp_path: Path, location: Path | None = None) -> Settings:
    return Settings(
        local=LocalServerSettings(home=tmp_path / "cache" / "neo4j"), prism_location=location
    )


def _built(settings: Settings) -> Path:
    binary = prism.cache_path(settings)
    fake_exe(binary.parent, binary.name, "exit 0\n")
    return binary


def test_prism_runner_names() -> None:
    for name in (
        "PrismRunner",
        "prism",
        "PRISMRUNNER",
        "apache_beam.runners.portability.prism_runner.PrismRunner",
    ):
        assert runners.is_prism(name), name
    for other in (None, "", "DirectRunner", "PortableRunner", "FlinkRunner"):
        assert not runners.is_prism(other), other


def test_prism_gets_the_cached_binary_quiet_logs_and_no_splitting(tmp_path: Path) -> None:
    settings = _prism_settings(tmp_path)
    binary = _built(settings)
    assert binary == tmp_path / "cache" / "prism" / BEAM / "prism"
    assert runners.prepare_beam_args(["--runner", "PrismRunner"], settings) == [
        "--runner",
        "PrismRunner",
        f"--prism_location={binary}",
        "--prism_log_level=warn",
        "--experiments=prism_disable_sdf_split",
    ]


def test_prism_location_setting_wins_over_the_cache(tmp_path: Path) -> None:
    mine = fake_exe(tmp_path / "bin", "prism", "exit 0\n")
    settings = _prism_settings(tmp_path, mine)
    _built(settings)
    assert f"--prism_location={mine}" in runners.prepare_beam_args(["--runner=prism"], settings)
    with pytest.raises(RunnerError, match=r"TRAJGRAPH_PRISM_LOCATION .* not an executable"):
        runners.prepare_beam_args(["--runner=prism"], _prism_settings(tmp_path, tmp_path / "nope"))


def test_prism_flags_of_the_user_win(tmp_path: Path) -> None:
    settings = _prism_settings(tmp_path)  # nothing built: none of these needs the cache
    given = fake_exe(tmp_path / "bin", "prism", "exit 0\n")
    argv = ["--runner", "PrismRunner", f"--prism_location={given}", "--prism_log_level", "debug"]
    argv += ["--experiments", "a,prism_disable_sdf_split"]
    assert runners.prepare_beam_args(argv, settings) == argv
    endpoint = ["--runner", "PrismRunner", "--job_endpoint", "localhost:8073"]
    assert runners.prepare_beam_args(endpoint, settings) == [
        *endpoint,
        "--prism_log_level=warn",
        "--experiments=prism_disable_sdf_split",
    ]
    url = ["--runner", "PrismRunner", "--prism_location", "https://example.invalid/prism.zip"]
    assert runners.prepare_beam_args(url, settings)[: len(url)] == url
    with pytest.raises(RunnerError, match="--prism_location /no/such/prism is not a file"):
        runners.prepare_beam_args(
            ["--runner=PrismRunner", "--prism_location=/no/such/prism"], settings
        )


def test_prism_without_a_binary_names_the_build_command_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _prism_settings(tmp_path)
    with pytest.raises(RunnerError) as e:
        runners.prepare_beam_args(["--runner", "PrismRunner"], settings)
    text = str(e.value)
    assert f"no Prism binary for Beam {BEAM}" in text
    assert "bash deploy/dev.sh prism" in text
    assert prism.build_command(settings) in text
    assert f"GOBIN={prism.cache_dir(settings)} go install {prism.PACKAGE}@v{BEAM}" in text
    # What dev.sh recorded when it could not build is the reason given.
    prism.cache_dir(settings).mkdir(parents=True)
    (prism.cache_dir(settings) / prism.UNAVAILABLE).write_text(
        "the Go module proxy did not answer: dial tcp: lookup proxy.golang.org\n"
    )
    with pytest.raises(RunnerError, match="Go module proxy did not answer"):
        prism.find(settings)
    (prism.cache_dir(settings) / prism.UNAVAILABLE).unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RunnerError, match=r"Go is not installed \(no `go` on PATH\)"):
        prism.find(settings)


@pytest.mark.parametrize(
    ("argv", "here"),
    [
        ([], True),
        (["--runner", "DirectRunner", "--direct_num_workers", "2"], True),
        (["--direct_running_mode", "multi_threading"], True),
        (["--direct_running_mode=multi_processing"], False),
        (["--runner", "PrismRunner"], True),  # Beam's default for Prism: LOOPBACK
        (["--runner", "PrismRunner", "--environment_type", "EXTERNAL"], False),
        (["--runner", "PortableRunner", "--environment_type=LOOPBACK"], True),
        (["--runner", "PortableRunner"], False),  # Beam's default: DOCKER
        (["--runner", "FlinkRunner", "--environment_type", "LOOPBACK"], True),
        (["--runner", "FlinkRunner", "--flink_master", "http://flink:8081"], False),
        (["--runner", "DataflowRunner", "--project", "p"], False),
    ],
)
def test_which_runs_have_their_workers_in_this_process(argv: list[str], here: bool) -> None:
    assert runners.workers_in_this_process(argv) is here
