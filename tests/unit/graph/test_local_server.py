"""graph.local_server without a server: config and pom text, the Java a Neo4j version needs,
missing-tool errors, status and stop when nothing runs (Java and Maven themselves:
tests/unit/trajgraph/test_jvm.py)."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fake_exe import fake_exe
from trajgraph.core.errors import ServerError
from trajgraph.core.settings import LocalServerSettings, Neo4jSettings, load
from trajgraph.graph import local_server as ls


def _local(tmp_path: Path, **changes: object) -> LocalServerSettings:
    return replace(LocalServerSettings(home=tmp_path / "home"), **changes)  # type: ignore[arg-type]


def _conf_dict(text: str) -> dict[str, str]:
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


# ------------------------------------------------------------------ paths and config


def test_paths_default_under_home_and_version(tmp_path: Path) -> None:
    p = ls.paths(_local(tmp_path))
    base = tmp_path / "home" / "5.26.30"
    assert p.version_dir == base
    assert p.lib_dir == base / "lib"
    assert p.data_dir == base / "data"
    assert p.run_dir == base / "run"
    assert p.conf_file == base / "run" / "conf" / "neo4j.conf"
    assert p.log_path == base / "run" / "logs" / "neo4j.log"


def test_paths_honour_data_and_run_dirs(tmp_path: Path) -> None:
    p = ls.paths(_local(tmp_path, data_dir=tmp_path / "d", run_dir=tmp_path / "r"))
    assert p.data_dir == tmp_path / "d"
    assert p.run_dir == tmp_path / "r"
    assert p.pid_file == tmp_path / "r" / "neo4j.pid"


def test_write_conf_content(tmp_path: Path) -> None:
    local = _local(tmp_path, bolt_port=7799, heap="300m", pagecache="64m")
    conf_file = ls.write_conf(local, database="graphs")
    assert conf_file == ls.paths(local).conf_file
    conf = _conf_dict(conf_file.read_text())
    assert conf["server.bolt.listen_address"] == "127.0.0.1:7799"
    assert conf["server.bolt.advertised_address"] == "127.0.0.1:7799"
    assert conf["server.http.enabled"] == "false"
    assert conf["server.https.enabled"] == "false"
    assert conf["dbms.security.auth_enabled"] == "true"
    assert conf["dbms.security.allow_csv_import_from_file_urls"] == "false"
    assert conf["dbms.usage_report.enabled"] == "false"
    assert conf["server.memory.heap.max_size"] == "300m"
    assert conf["server.memory.pagecache.size"] == "64m"
    assert conf["server.directories.data"] == str(tmp_path / "home" / "5.26.30" / "data")
    assert conf["server.directories.logs"] == str(ls.paths(local).logs_dir)
    assert conf["initial.dbms.default_database"] == "graphs"
    # Strict validation stays on, so a typo in a setting name fails the start loudly.
    assert "server.config.strict_validation.enabled" not in conf


def test_browser_conf_http_on_the_loopback_auth_on_and_the_browser_on_the_classpath(
    tmp_path: Path,
) -> None:
    from trajgraph.graph.local_server.browser import GUIDE, browser_dir
    from trajgraph.queries import library
    from trajgraph.queries.library.browser_guide import guide_html

    local = _local(tmp_path, bolt_port=7799, browser=True, http_port=7586)
    conf = _conf_dict(ls.neo4j_conf(local))
    assert conf["server.http.enabled"] == "true"
    assert conf["server.http.listen_address"] == "127.0.0.1:7586"
    assert conf["server.default_listen_address"] == "127.0.0.1"
    assert conf["dbms.security.auth_enabled"] == "true"
    assert conf["browser.post_connect_cmd"] == f"play http://127.0.0.1:7586/browser/{GUIDE}"
    classpath = ls.java_command(Path("/usr/bin/java"), local)[-4]
    assert classpath == f"{ls.paths(local).lib_dir}/*:{browser_dir(local)}"
    assert ls.java_command(Path("/usr/bin/java"), _local(tmp_path))[-4].endswith("/lib/*")
    # The default HTTP port is 213 below the Bolt port: 7687 -> 7474, the usual pair.
    assert load({"NEO4J_URI": "bolt://127.0.0.1:7713"}).local.http_port == 7500
    assert load({"TRAJGRAPH_NEO4J_HTTP_PORT": "9000"}).local.http_port == 9000
    guide = guide_html()
    assert all(f"<h3>{name}</h3>" in guide for name in library.names())
    assert "<script" not in guide.lower() and "&lt;" in guide  # query text escaped


def test_conf_rejects_bad_memory_size(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="heap size"):
        ls.neo4j_conf(_local(tmp_path, heap="lots"))


def test_java_command_uses_heap_and_entry_point(tmp_path: Path) -> None:
    local = _local(tmp_path, heap="256m")
    cmd = ls.java_command(Path("/opt/java/bin/java"), local)
    p = ls.paths(local)
    assert cmd[0] == "/opt/java/bin/java"
    assert "-Xmx256m" in cmd and "-Xms256m" in cmd
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in cmd
    assert cmd[cmd.index("-cp") + 1] == f"{p.lib_dir}/*"
    assert cmd[-3:] == [
        ls.ENTRY_POINT,
        f"--home-dir={p.run_dir}",
        f"--config-dir={p.conf_file.parent}",
    ]


def test_pom_content() -> None:
    pom = ls.pom_xml("5.26.30")
    assert "<groupId>org.neo4j</groupId>" in pom
    assert "<artifactId>neo4j</artifactId>" in pom
    assert "<version>5.26.30</version>" in pom
    assert "<packaging>pom</packaging>" in pom


@pytest.mark.parametrize("bad", ["", "latest", "5.26.30</version>", "5;rm -rf /"])
def test_pom_rejects_odd_versions(bad: str) -> None:
    with pytest.raises(ServerError, match="not a Neo4j version"):
        ls.pom_xml(bad)


def test_is_local_uri() -> None:
    assert ls.is_local_uri("bolt://127.0.0.1:7687")
    assert ls.is_local_uri("neo4j://localhost")
    assert not ls.is_local_uri("neo4j+s://abc.databases.neo4j.io")


def test_settings_load_new_fields(tmp_path: Path) -> None:
    s = load({"TRAJGRAPH_NEO4J_RUN": str(tmp_path / "r"), "JAVA_HOME": "/opt/jdk"})
    assert s.local.run_dir == tmp_path / "r"
    assert s.local.system_java_home == Path("/opt/jdk")
    assert load({}).local.run_dir is None


# ------------------------------------------------------------------ Java


def test_java_requirement() -> None:
    assert ls.java_requirement("5.26.30") == (17, 21)
    assert ls.java_requirement("2025.10.1") == (21, None)
    with pytest.raises(ServerError, match="not supported"):
        ls.java_requirement("4.4.30")


def test_find_java_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ServerError, match=r"Java not found.*openjdk-17-jdk-headless"):
        ls.find_java(_local(tmp_path))


def test_find_java_too_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    fake_exe(bin_dir, "java", "echo 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ServerError, match=r"needs Java 17 or 21.*is Java 11"):
        ls.find_java(_local(tmp_path))


def test_find_java_prefers_java_home_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_home = tmp_path / "jdk11"
    fake_exe(old_home / "bin", "java", "echo 'openjdk version \"11.0.2\"' >&2\n")
    path_dir = tmp_path / "bin"
    fake_exe(path_dir, "java", "echo 'openjdk version \"21.0.1\"' >&2\n")
    monkeypatch.setenv("PATH", str(path_dir))
    # JAVA_HOME too old for 5.26: the one on PATH is used instead.
    java = ls.find_java(_local(tmp_path, system_java_home=old_home))
    assert (java.major, java.source) == (21, "PATH")
    # An explicit TRAJGRAPH_JAVA_HOME that is too old is an error, not skipped.
    with pytest.raises(ServerError, match="TRAJGRAPH_JAVA_HOME"):
        ls.find_java(_local(tmp_path, java_home=old_home))
    # 2025.x needs 21+: Java 21 on PATH fits.
    assert ls.find_java(_local(tmp_path, version="2025.10.1")).major == 21


def test_find_java_home_without_binary(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="has no executable bin/java"):
        ls.find_java(_local(tmp_path, java_home=tmp_path / "nojdk"))


# ------------------------------------------------------------------ Maven


def test_ensure_jars_without_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ServerError, match=r"Maven \(`mvn`\) is not on PATH.*apt-get install maven"):
        ls.ensure_jars(_local(tmp_path), log=lambda _m: None)


def test_ensure_jars_mvn_fails_shows_output_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    fake_exe(bin_dir, "mvn", "echo '[ERROR] Could not resolve org.neo4j:neo4j' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    local = _local(tmp_path)
    with pytest.raises(ServerError, match=r"mvn failed \(exit 1\)[\s\S]*Could not resolve"):
        ls.ensure_jars(local, log=lambda _m: None)
    assert not ls.jars_ready(local)
    assert (ls.paths(local).version_dir / "pom.xml").is_file()


def test_ensure_jars_marks_complete_and_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    calls = tmp_path / "calls"
    # A fake mvn that "copies" two jars into -DoutputDirectory.
    fake_exe(
        bin_dir,
        "mvn",
        f'echo run >> "{calls}"\n'
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) d="${a#*=}";; esac; done\n'
        'mkdir -p "$d" && touch "$d/a.jar" "$d/b.jar"\n',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")  # the fake mvn comes first
    local = _local(tmp_path)
    lib = ls.ensure_jars(local, log=lambda _m: None)
    assert sorted(f.name for f in lib.glob("*.jar")) == ["a.jar", "b.jar"]
    assert ls.jars_ready(local)
    assert ls.ensure_jars(local, log=lambda _m: None) == lib
    assert calls.read_text().count("run") == 1  # second call reused the jars


# ------------------------------------------------------------------ status and stop


def test_status_and_stop_when_nothing_runs(tmp_path: Path) -> None:
    local = _local(tmp_path, bolt_port=_free_port())
    st = ls.status(Neo4jSettings(), local)
    assert not st.running and st.pid is None
    assert st.bolt_uri == f"bolt://127.0.0.1:{local.bolt_port}"
    assert ls.stop(local) is False


def test_stale_pid_file_is_not_running(tmp_path: Path) -> None:
    local = _local(tmp_path, bolt_port=_free_port())
    p = ls.paths(local)
    p.run_dir.mkdir(parents=True)
    p.pid_file.write_text("999999999\n")
    assert ls.status(Neo4jSettings(), local).pid is None
    assert ls.stop(local) is False
    assert not p.pid_file.exists()


def test_start_rejects_short_password(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="at least 8 characters"):
        ls.start(Neo4jSettings(password="short"), _local(tmp_path), log=lambda _m: None)


def test_start_refuses_port_taken_by_other_program(tmp_path: Path) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        local = _local(tmp_path, bolt_port=srv.getsockname()[1])
        with pytest.raises(ServerError, match="already taken by another program"):
            ls.start(Neo4jSettings(), local, log=lambda _m: None)


def test_bolt_answers_false_for_non_bolt(tmp_path: Path) -> None:
    assert not ls.bolt_answers(_free_port(), timeout=0.5)


def test_main_usage_and_status_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ls.main(["bogus"]) == 2
    monkeypatch.setenv("TRAJGRAPH_NEO4J_HOME", str(tmp_path / "home"))
    # A run or data dir exported for a developer's own server would point at that server.
    monkeypatch.delenv("TRAJGRAPH_NEO4J_RUN", raising=False)
    monkeypatch.delenv("TRAJGRAPH_NEO4J_DATA", raising=False)
    monkeypatch.setenv("TRAJGRAPH_NEO4J_PORT", str(_free_port()))
    assert ls.main(["status"]) == 3
    assert "not running" in capsys.readouterr().out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Named, not computed, in the parameters: pytest-xdist workers must collect the same ids.
@pytest.mark.parametrize("text", ["-1", "0", "our process group", "this process"])
def test_stop_never_signals_a_pid_file_that_is_not_our_server(
    tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44: a pid file holding a process group or another process is removed, not obeyed."""
    text = {"our process group": f"-{os.getpgrp()}", "this process": str(os.getpid())}.get(
        text, text
    )
    sent: list[tuple[int, int]] = []
    real = os.kill
    monkeypatch.setattr(
        os, "kill", lambda pid, sig: real(pid, sig) if sig == 0 else sent.append((pid, sig))
    )
    local = _local(tmp_path, bolt_port=_free_port())
    p = ls.paths(local)
    p.run_dir.mkdir(parents=True)
    p.pid_file.write_text(text + "\n")
    assert ls.status(Neo4jSettings(), local).pid is None
    assert ls.stop(local) is False
    assert sent == []
    assert not p.pid_file.exists()
