"""trajgraph.core.jvm on its own: reading Java versions, choosing a Java for a stated need, and
Maven fetches that hand every failure to the caller to word (the local server's and the Flink
runner's wordings are tested in tests/unit/graph/test_local_server.py and
tests/unit/pipelines/test_runners.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_exe import fake_exe
from trajgraph.core import jvm
from trajgraph.core.errors import ServerError


class Failed(Exception):
    def __init__(self, failure: jvm.MavenFailure) -> None:
        self.failure = failure
        super().__init__(failure.reason)


# ------------------------------------------------------------------ Java


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('java version "1.8.0_292"\nJava(TM) SE Runtime Environment', 8),
        ('openjdk version "21.0.2" 2024-01-16 LTS', 21),
        ('openjdk version "25" 2025-09-16', 25),
        ('Picked up JAVA_TOOL_OPTIONS: -Xss1m\nopenjdk version "11.0.2" 2019-01-15', 11),
        ('openjdk version "26-ea" 2026-03-17', 26),
    ],
)
def test_parse_java_version(text: str, major: int) -> None:
    assert jvm.parse_java_version(text) == major


def test_parse_java_version_garbage() -> None:
    with pytest.raises(ServerError, match="cannot read the Java version"):
        jvm.parse_java_version("command not found")


def test_find_java_takes_the_first_that_fits_the_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "jdk25"
    fake_exe(home / "bin", "java", "echo 'openjdk version \"25\"' >&2\n")
    path_dir = tmp_path / "bin"
    fake_exe(path_dir, "java", "echo 'openjdk version \"17.0.15\"' >&2\n")
    monkeypatch.setenv("PATH", str(path_dir))
    java = jvm.find_java(need=(11, 21), what="a job server", system_java_home=home)
    assert (java.major, java.source, java.path) == (17, "PATH", path_dir / "java")
    # No upper bound: JAVA_HOME's 25 comes first and fits.
    assert jvm.find_java(need=(21, None), what="x", system_java_home=home).source == "JAVA_HOME"
    with pytest.raises(ServerError, match=r"a job server needs Java 8 to 9, but .* is Java 25"):
        jvm.find_java(need=(8, 9), wanted="Java 8 to 9", what="a job server", java_home=home)


# ------------------------------------------------------------------ Maven


@pytest.mark.parametrize("bad", ["org.neo4j:neo4j", "a:b:1</version>", "a:b:c:d", "a:b:1 2"])
def test_coordinates_are_checked_before_they_reach_xml(bad: str) -> None:
    with pytest.raises(ValueError, match="not Maven coordinates"):
        jvm.pom_xml(bad)


def test_pom_names_the_one_dependency() -> None:
    pom = jvm.pom_xml("org.apache.beam:beam-sdks-java-core:2.77.0")
    assert "<groupId>org.apache.beam</groupId>" in pom
    assert "<artifactId>beam-sdks-java-core</artifactId>" in pom
    assert pom.count("<version>2.77.0</version>") == 2


def test_fetch_jar_failure_goes_to_the_callers_error(tmp_path: Path) -> None:
    mvn = fake_exe(
        tmp_path / "bin",
        "mvn",
        'echo "[ERROR] Could not find artifact a:b:jar:1 in central '
        '(https://repo.maven.apache.org/maven2)"\nexit 1\n',
    )
    with pytest.raises(Failed) as info:
        jvm.fetch_jar("a:b:1", tmp_path / "cache", fail=Failed, log=lambda _m: None, mvn=str(mvn))
    f = info.value.failure
    assert (f.coords, f.returncode) == ("a:b:1", 1)
    assert f.reason == (
        "mvn exit 1: Could not find artifact a:b:jar:1 in central "
        "(https://repo.maven.apache.org/maven2)"
    )
    assert f.repositories == "central (https://repo.maven.apache.org/maven2)"
    assert not list((tmp_path / "cache").glob("*.jar"))
    assert not list((tmp_path / "cache").glob(".*.partial"))


def test_fetch_without_maven_is_the_callers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Failed) as info:
        jvm.fetch_with_dependencies("a:b:1", tmp_path / "v" / "lib", fail=Failed)
    assert info.value.failure.reason == jvm.MVN_MISSING
    assert info.value.failure.returncode is None


def test_fetch_with_dependencies_once_then_reuse(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    mvn = fake_exe(
        tmp_path / "bin",
        "mvn",
        f'echo run >> "{calls}"\n'
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) d="${a#*=}";; esac; done\n'
        'mkdir -p "$d" && touch "$d/a.jar" "$d/b.jar"\n',
    )
    lib = tmp_path / "v" / "lib"
    logs: list[str] = []
    for _ in range(2):
        got = jvm.fetch_with_dependencies("a:b:1", lib, fail=Failed, log=logs.append, mvn=str(mvn))
        assert got == lib and sorted(f.name for f in lib.iterdir()) == ["a.jar", "b.jar"]
    assert calls.read_text().count("run") == 1
    assert jvm.jars_ready(lib) and (lib.parent / "pom.xml").is_file()
    assert not (tmp_path / "v" / "lib.partial").exists()
    assert any("a:b:1" in m for m in logs)
