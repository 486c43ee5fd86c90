"""Cross-run lessons against the real Neo4j on real runs of the Django corpus: the engine,
the CLI, HTTP and MCP; the brief's and the reminder's use of them; deletes, rewrites and
re-ingests; tenant isolation.

The corpus subset: the seven runs that hit "Requested setting …, but settings are not
configured" (ImproperlyConfigured), two that hit a missing psycopg2 and one that never got
past a missing module. Read from ../shared/corpora (skipped when absent), never copied.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import neo4j
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.integration.ingesting import NO_MODELS, Ingest
from tests.integration.servers import serve_in_thread
from trajgraph import cli
from trajgraph.api import create_app
from trajgraph.client import TrajGraph
from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.graph.embedders import HashEmbedder
from trajgraph.mcp_server import RequireBearer, build_server
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.queries import library
from trajgraph.queries.lessons import lessons
from trajgraph.queries.memory import build_brief, remind

SETTINGS_RUNS = ["11149", "11211", "11880", "12713", "13028", "13568", "14534"]
OTHER_RUNS = ["12193", "14792", "11066"]
SETTINGS_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "check.py", line 3, in <module>\n'
    "    from django.contrib.auth.models import Group\n"
    "django.core.exceptions.ImproperlyConfigured: Requested setting LOGGING_CONFIG, but "
    "settings are not configured. You must either define the environment variable "
    "DJANGO_SETTINGS_MODULE or call settings.configure() before accessing settings."
)
SETTINGS_SIG = "Requested setting <name>, but settings are not configured"
KEY_A = "lessons-a-" + "x" * 20
KEY_B = "lessons-b-" + "y" * 20


def run_id(n: str) -> str:
    return f"django__django-{n}"


@dataclasses.dataclass
class Corpus:
    driver: neo4j.Driver
    settings: Settings
    tenant: str
    paths: dict[str, Path]

    @property
    def db(self) -> str:
        return self.settings.neo4j.database

    def lessons(self, **kw: Any) -> Any:
        return lessons(self.driver, database=self.db, tenant=self.tenant, **kw)

    def count(self, statement: str, **params: Any) -> int:
        records, _, _ = self.driver.execute_query(statement, params, database_=self.db)
        return int(records[0]["n"])

    def signature_count(self, text_start: str) -> int:
        return self.count(
            "MATCH (g:Signature {tenant: $t}) WHERE g.text STARTS WITH $s RETURN count(g) AS n",
            t=self.tenant,
            s=text_start,
        )


@pytest.fixture(scope="module")
def corpus(
    driver: neo4j.Driver, neo4j_settings: Settings, django_corpus: Path, ingested: Ingest
) -> Corpus:
    paths = {
        run_id(n): django_corpus / f"{run_id(n)}.traj.json" for n in SETTINGS_RUNS + OTHER_RUNS
    }
    run = ingested(*paths.values(), args=NO_MODELS)
    assert run.summary.dead_lettered == 0
    assert run.summary.ingested == len(paths)
    return Corpus(driver, neo4j_settings, run.tenant, paths)


def _raw_actions(path: Path) -> dict[int, str]:
    (traj,) = (t for r in split_records(str(path), path.read_bytes()) for t in normalize(r))
    return {int(t["idx"]): t["action"] for t in traj["turns"]}


# -- the engine ---------------------------------------------------------------------------------


def test_an_error_text_finds_the_seven_runs_and_what_got_them_past_it(corpus: Corpus) -> None:
    answer = corpus.lessons(error=SETTINGS_ERROR, budget=1500)
    assert answer.unknown == []
    (sig,) = answer.signatures
    assert sig["signature"].startswith(SETTINGS_SIG)
    assert sig["runs"] == sorted(run_id(n) for n in SETTINGS_RUNS)
    assert sig["got_past"] == sig["runs"]  # all seven got past it
    resolutions = sig["resolutions"]
    assert resolutions, answer.text
    # ranked by the runs they worked in; every run is covered by some shown resolution
    counts = [len(r["worked_in"]) for r in resolutions]
    assert counts == sorted(counts, reverse=True) and counts[0] >= 3
    assert set().union(*(r["worked_in"] for r in resolutions)) == set(sig["runs"])
    # grounded in verbatim turns: the shown action is the head of the logged one
    for r in resolutions:
        actions = _raw_actions(corpus.paths[r["trajectory"]])
        for step in r["steps"]:
            assert actions[step["turn"]].startswith(step["action"].removesuffix("…"))
            assert r["failed_turns"][0] < step["turn"] <= r["resolved_turn"]
        keys = [k["key"] for s in r["steps"] for k in s["key_actions"]]
        assert "edit the failing script" in keys
    assert answer.tokens <= 1500
    assert "seen in 7 other runs; 7 got past it." in answer.text
    assert "settings.configure" in answer.text


def test_a_turn_in_the_graph_leaves_its_own_trajectory_out(corpus: Corpus) -> None:
    me = run_id("11149")
    answer = corpus.lessons(trajectory=me, turn=2, budget=800)
    (sig,) = answer.signatures
    assert me not in sig["runs"] and len(sig["runs"]) == 6
    assert all(me not in r["worked_in"] and r["trajectory"] != me for r in sig["resolutions"])
    assert "seen in 6 other runs" in answer.text and me not in answer.text
    # asking with the error text and the trajectory leaves it out too
    by_text = corpus.lessons(error=SETTINGS_ERROR, trajectory=me)
    assert len(by_text.signatures[0]["runs"]) == 6
    # a turn without a failure has no lessons; unknown turns and runs are errors
    assert corpus.lessons(trajectory=me, turn=0).signatures == []
    with pytest.raises(NotFoundError, match="no turn '999'"):
        corpus.lessons(trajectory=me, turn=999)
    with pytest.raises(NotFoundError, match="no trajectory 'no-such-run'"):
        corpus.lessons(trajectory="no-such-run", turn=1)


def test_the_same_quoted_values_rank_first(corpus: Corpus) -> None:
    answer = corpus.lessons(error="ModuleNotFoundError: No module named 'psycopg2'", budget=1200)
    (sig,) = answer.signatures
    assert sig["signature"] == "No module named <q>"
    top = sig["resolutions"][0]
    assert top["same_error_in"] and top["trajectory"] in {run_id("12193"), run_id("14792")}
    assert "sys.modules" in answer.text  # those runs mocked psycopg2
    assert sig["never_got_past"][0]["trajectory"] == run_id("11066")


def test_a_failure_typed_with_other_quotes_gets_the_same_lessons(corpus: Corpus) -> None:
    quoted = corpus.lessons(error="ModuleNotFoundError: No module named 'psycopg2'", budget=1200)
    typed = corpus.lessons(error="No module named psycopg2", budget=1200)  # the quotes left out
    assert typed.unknown == [] and len(typed.signatures) == 1
    (q,), (t,) = quoted.signatures, typed.signatures
    assert t["signature"] == q["signature"] == "No module named <q>"
    assert t["runs"] == q["runs"] and t["never_got_past"] == q["never_got_past"]
    # ranked the same: the runs that failed on psycopg2 itself come first
    assert t["resolutions"] == q["resolutions"] and t["resolutions"][0]["same_error_in"]
    # the logs print the setting bare: quoting it finds the same seven runs
    setting = corpus.lessons(
        error="Requested setting 'DATABASES', but settings are not configured.", budget=400
    )
    assert setting.unknown == []
    assert setting.signatures[0]["signature"].startswith(SETTINGS_SIG)
    assert setting.signatures[0]["runs"] == sorted(run_id(n) for n in SETTINGS_RUNS)


def test_a_failure_inside_a_scripts_wrapper_finds_the_runs_that_share_it(corpus: Corpus) -> None:
    # Issue 34: a held-out run printed the error after its own context and got "No other
    # run showed"; the shared part (the message) is matched, the wrapper kept as context.
    wrapped = (
        "floatformat('0.00', 0) with error: Requested setting USE_THOUSAND_SEPARATOR, but "
        "settings are not configured. You must either define the environment variable "
        "DJANGO_SETTINGS_MODULE or call settings.configure() before accessing settings."
    )
    answer = corpus.lessons(error=f"Testing floatformat\n{wrapped}\ndone", budget=600)
    assert answer.unknown == [] and "No other run showed" not in answer.text
    (sig,) = answer.signatures
    assert sig["signature"].startswith(SETTINGS_SIG)
    assert sig["runs"] == sorted(run_id(n) for n in SETTINGS_RUNS)
    assert sig["asked_error"] == wrapped and sig["asked_context"] == "floatformat('0.00', 0)"
    assert "asked after `floatformat('0.00', 0)`" in answer.text
    assert sig["resolutions"] and "settings.configure" in answer.text


def test_the_budget_bounds_the_answer(corpus: Corpus) -> None:
    sizes = []
    for budget in (80, 200, 600, 2000):
        answer = corpus.lessons(error=SETTINGS_ERROR, budget=budget)
        assert answer.tokens <= budget
        sizes.append(len(answer.signatures[0]["resolutions"]))
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    small = corpus.lessons(error=SETTINGS_ERROR, budget=80)
    assert small.omitted["resolutions"] >= 1
    with pytest.raises(ConfigError, match="budget must be between"):
        corpus.lessons(error=SETTINGS_ERROR, budget=10)


def test_unknown_failures_say_so(corpus: Corpus) -> None:
    answer = corpus.lessons(error="SomeError: a failure nobody has seen before")
    assert answer.signatures == [] and answer.unknown == ["a failure nobody has seen before"]
    assert "No other run showed" in answer.text


def test_analyst_queries_on_the_corpus(corpus: Corpus) -> None:
    rows = library.run(
        corpus.driver,
        "recurring_failures",
        {"tenant": corpus.tenant, "min_runs": 2},
        database=corpus.db,
    )
    top = next(r for r in rows if r["signature"].startswith(SETTINGS_SIG))
    assert (top["runs"], top["got_past"]) == (7, 7)
    assert top["top_resolution"]["key"] == "edit the failing script"
    assert top["top_resolution"]["worked_in"] == 7
    assert top["first_seen"]["at"] <= top["last_seen"]["at"]  # real timestamps
    rows = library.run(
        corpus.driver,
        "resolutions",
        {"tenant": corpus.tenant, "signature": top["signature"]},
        database=corpus.db,
    )
    assert sorted(r["trajectory"] for r in rows) == sorted(run_id(n) for n in SETTINGS_RUNS)
    assert all(r["outcome"] == "resolved" and r["resolution"] for r in rows)


# -- brief and remind -----------------------------------------------------------------------------


def test_the_brief_says_where_else_an_open_failure_was_seen(corpus: Corpus) -> None:
    me = run_id("11149")
    brief = build_brief(
        corpus.driver, database=corpus.db, tenant=corpus.tenant, trajectory=me, before_turn=3
    )
    (line,) = brief.sections["open_failures"]
    assert line["turns"] == [2]
    assert line["lessons"]["runs"] == 6 and line["lessons"]["got_past"] == 6
    assert line["lessons"]["top"]["trajectory"] != me
    assert "seen in 6 other runs, 6 got past it; got past it by `" in brief.text
    # smaller budgets keep the failure and shorten the lesson first, then drop it
    kept = []
    for budget in (140, 180):
        small = build_brief(
            corpus.driver,
            database=corpus.db,
            tenant=corpus.tenant,
            trajectory=me,
            before_turn=3,
            budget=budget,
        )
        assert small.tokens <= budget
        (line,) = small.sections["open_failures"]
        kept.append(sorted(line.get("lessons", {})))
    assert kept == [[], ["got_past", "runs", "signature"]]


PSYCOPG = "ModuleNotFoundError: No module named 'psycopg2'"


def _run(id_: str, turns: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": id_,
        "task": "Reproduce the dbshell bug.",
        "turns": [
            {"idx": i, "action": a, "observation": o, "actor": "agent"}
            for i, (a, o) in enumerate(turns)
        ],
    }


def _fail(code: int = 1) -> str:
    return (
        f"<returncode>{code}</returncode>\n<output>\nTraceback (most recent call last):\n"
        f'  File "repro.py", line 1, in <module>\n    import psycopg2\n{PSYCOPG}\n</output>'
    )


OK = "<returncode>0</returncode>\n<output>\nok\n</output>"
PIP_FAIL = (
    "<returncode>1</returncode>\n<output>\nERROR: Could not find a version that satisfies "
    "the requirement psycopg2\n</output>"
)
MOCK = (
    "cat <<'EOF' > repro.py\nimport sys\nfrom unittest.mock import MagicMock\n"
    "sys.modules['psycopg2'] = MagicMock()\nEOF"
)


def test_remind_names_what_other_runs_tried_in_vain(
    driver: neo4j.Driver, neo4j_settings: Settings, ingested: Ingest
) -> None:
    runs = [
        _run(f"elsewhere-{i}", [
            ("python repro.py", _fail()),
            ("pip install psycopg2", PIP_FAIL),
            ("python repro.py", _fail()),  # the same failure: the install did not help
            (MOCK, OK),
            ("python repro.py", OK),
        ])
        for i in (1, 2)
    ] + [_run("asking", [("python repro.py", _fail()), ("ls", OK)])]  # fmt: skip
    run = ingested(runs, args=NO_MODELS)
    assert run.summary.dead_lettered == 0
    tenant = run.tenant
    db = neo4j_settings.neo4j.database
    said = remind(
        driver,
        database=db,
        tenant=tenant,
        trajectory="asking",
        next_action="pip install psycopg2",
    )
    assert said.rule == "failed_elsewhere" and said.cites == [0]
    assert "elsewhere-1 turn 1" in (said.reminder or "")
    assert "elsewhere-2 turn 1" in (said.reminder or "")
    # what the action adds to the failing command is what counts
    rerun = remind(
        driver,
        database=db,
        tenant=tenant,
        trajectory="asking",
        next_action="pip install psycopg2 && python repro.py",
    )
    assert rerun.rule == "failed_elsewhere" and "ran `pip install psycopg2`" in (
        rerun.reminder or ""
    )
    for quiet in ("ls -la", "pip install requests", "python repro.py --verbose"):
        r = remind(driver, database=db, tenant=tenant, trajectory="asking", next_action=quiet)
        assert r.rule != "failed_elsewhere", quiet
    # before the failure there is nothing open to be reminded of
    early = remind(
        driver,
        database=db,
        tenant=tenant,
        trajectory="asking",
        next_action="pip install psycopg2",
        before_turn=0,
    )
    assert early.reminder is None
    # the lessons for the asking run point at the mock, not the install
    answer = lessons(driver, database=db, tenant=tenant, trajectory="asking", turn=0)
    (sig,) = answer.signatures
    assert sig["resolutions"][0]["steps"][0]["turn"] == 3
    (tried,) = sig["did_not_help"]
    assert tried["key"] == "pip install psycopg2" and tried["never_helped"]
    assert tried["runs"] == ["elsewhere-1", "elsewhere-2"]


# -- deletes, rewrites, re-ingests, tenants --------------------------------------------------------


def test_delete_and_reingest_keep_lessons_and_counts_right(
    corpus: Corpus, ingested: Ingest
) -> None:
    gone = run_id("14534")
    before = corpus.lessons(error=SETTINGS_ERROR)
    nodes = corpus.count("MATCH (n {tenant: $t}) RETURN count(n) AS n", t=corpus.tenant)
    rels = corpus.count("MATCH (n {tenant: $t})-[r]->() RETURN count(r) AS n", t=corpus.tenant)
    governance.delete_trajectory(corpus.driver, corpus.db, corpus.tenant, gone)
    after = corpus.lessons(error=SETTINGS_ERROR, budget=2000)
    (sig,) = after.signatures
    assert gone not in sig["runs"] and len(sig["runs"]) == 6
    assert all(gone not in r["worked_in"] for r in sig["resolutions"])
    assert gone not in after.text
    assert (
        corpus.count(
            "MATCH (r:Resolution {tenant: $t, trajectory_id: $id}) RETURN count(r) AS n",
            t=corpus.tenant,
            id=gone,
        )
        == 0
    )
    assert corpus.signature_count(SETTINGS_SIG) == 1  # still shown by six runs
    back = ingested(corpus.paths[gone], tenant=corpus.tenant, args=NO_MODELS)
    assert back.summary.dead_lettered == 0
    again = corpus.lessons(error=SETTINGS_ERROR)
    assert again.signatures == before.signatures and again.text == before.text
    assert corpus.count("MATCH (n {tenant: $t}) RETURN count(n) AS n", t=corpus.tenant) == nodes
    assert (
        corpus.count("MATCH (n {tenant: $t})-[r]->() RETURN count(r) AS n", t=corpus.tenant) == rels
    )
    # ingesting the same files again writes nothing
    summary = ingested(*corpus.paths.values(), tenant=corpus.tenant, args=NO_MODELS).summary
    assert summary.dead_lettered == 0
    assert summary.unchanged == len(corpus.paths) and summary.rows_written == 0


def test_the_last_run_of_a_signature_takes_it_along(
    driver: neo4j.Driver, neo4j_settings: Settings, ingested: Ingest, tmp_path: Path
) -> None:
    """Deleting or rewriting the only trajectories that showed a failure removes its
    signature: no node is left without the error states it counts."""
    db = neo4j_settings.neo4j.database
    failing = [_run("r1", [("python repro.py", _fail()), ("python repro.py", OK)])]
    log = tmp_path / "r.jsonl"
    log.write_text(json.dumps(failing[0]) + "\n")
    other = tmp_path / "r2.jsonl"
    other.write_text(json.dumps({**failing[0], "id": "r2"}) + "\n")

    def signatures() -> int:
        records, _, _ = driver.execute_query(
            "MATCH (g:Signature {tenant: $t}) RETURN count(g) AS n", t=tenant, database_=db
        )
        return int(records[0]["n"])

    run = ingested(log, other, args=NO_MODELS)
    assert run.summary.dead_lettered == 0
    tenant = run.tenant
    assert signatures() == 1
    governance.delete_trajectory(driver, db, tenant, "r2")
    assert signatures() == 1
    # r1 rewritten without the failure: its signature goes with the old content
    fixed = _run("r1", [("python repro.py", OK)])
    log.write_text(json.dumps(fixed) + "\n")
    assert ingested(log, tenant=tenant, args=NO_MODELS).summary.dead_lettered == 0
    assert signatures() == 0
    records, _, _ = driver.execute_query(
        "MATCH (r:Resolution {tenant: $t}) RETURN count(r) AS n", t=tenant, database_=db
    )
    assert records[0]["n"] == 0
    # and back
    log.write_text(json.dumps(failing[0]) + "\n")
    assert ingested(log, tenant=tenant, args=NO_MODELS).summary.dead_lettered == 0
    assert signatures() == 1
    governance.delete_trajectory(driver, db, tenant, "r1")
    assert signatures() == 0


def test_tenants_do_not_share_lessons(corpus: Corpus, ingested: Ingest) -> None:
    first = run_id(SETTINGS_RUNS[0])
    run = ingested(corpus.paths[first], args=NO_MODELS)
    assert run.summary.dead_lettered == 0
    other = run.tenant
    theirs = lessons(corpus.driver, database=corpus.db, tenant=other, error=SETTINGS_ERROR)
    assert theirs.signatures[0]["runs"] == [first]  # only their own run
    ours = corpus.lessons(error=SETTINGS_ERROR)
    assert len(ours.signatures[0]["runs"]) == 7
    records, _, _ = corpus.driver.execute_query(
        "MATCH (g:Signature) WHERE g.tenant IN [$a, $b] AND g.text STARTS WITH $s "
        "RETURN collect(DISTINCT g.uid) AS uids",
        a=corpus.tenant,
        b=other,
        s=SETTINGS_SIG,
        database_=corpus.db,
    )
    assert len(records[0]["uids"]) == 2  # one node per tenant
    nobody = lessons(corpus.driver, database=corpus.db, tenant=f"{other}-x", error=SETTINGS_ERROR)
    assert nobody.signatures == [] and nobody.unknown


# -- front ends ---------------------------------------------------------------------------------


def test_cli(corpus: Corpus, capsys: pytest.CaptureFixture[str]) -> None:
    me = run_id("11880")
    assert cli.main(["lessons", SETTINGS_ERROR, "--tenant", corpus.tenant, "--budget", "300"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Failure `Requested setting <name>") and "Got past it:" in out
    assert (
        cli.main(
            ["lessons", "--trajectory", me, "--turn", "4", "--tenant", corpus.tenant, "--json"]
        )
        == 0
    )
    body = json.loads(capsys.readouterr().out)
    assert body["trajectory"] == me and len(body["signatures"][0]["runs"]) == 6
    assert cli.main(["lessons", "--tenant", corpus.tenant]) == 2
    assert "give an error text" in capsys.readouterr().err
    # typed without shell quotes (the words arrive apart) and without the logs' quotes
    words = ["No", "module", "named", "psycopg2", "--tenant", corpus.tenant, "--json"]
    assert cli.main(["lessons", *words]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["error"] == "No module named psycopg2" and body["unknown"] == []
    assert body["signatures"][0]["signature"] == "No module named <q>"


def _call(url: str, key: str | None, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("content-type", "application/json")
    if key:
        req.add_header("authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        assert "Traceback" not in text
        return e.code, json.loads(text)


def test_http(corpus: Corpus) -> None:
    settings = dataclasses.replace(
        corpus.settings, api_keys={KEY_A: corpus.tenant, KEY_B: f"{corpus.tenant}-nobody"}
    )
    client = TrajGraph(corpus.driver, database=corpus.db, embedder=HashEmbedder(256))
    with serve_in_thread(create_app(settings, client)) as url:
        base = f"{url}/v1/lessons"
        q = urllib.parse.urlencode({"error": SETTINGS_ERROR, "budget": 400})
        status, body = _call(f"{base}?{q}", KEY_A)
        assert status == 200 and body["tokens"] <= 400
        assert len(body["signatures"][0]["runs"]) == 7
        me = run_id("12713")
        status, mine = _call(f"{base}?trajectory={me}&turn=7", KEY_A)
        assert status == 200 and me not in mine["signatures"][0]["runs"]
        status, posted = _call(base, KEY_A, {"error": SETTINGS_ERROR, "budget": 400})
        assert status == 200 and posted["text"] == body["text"]
        # another tenant's key sees none of it; no key is refused; bad requests are JSON
        status, theirs = _call(f"{base}?{q}", KEY_B)
        assert status == 200 and theirs["signatures"] == [] and theirs["unknown"]
        assert _call(f"{base}?{q}", None)[0] == 401
        status, err = _call(base, KEY_A)
        assert status == 422 and "trajectory" in err["error"]["message"]
        status, err = _call(f"{base}?trajectory=no-such-run&turn=1", KEY_A)
        assert status == 404 and err["error"]["code"] == "not_found"
        status, err = _call(f"{base}?{q}&budget=5", KEY_A)
        assert status == 422
        status, err = _call(base, KEY_A, {"error": "x" * 30_000})
        assert status in (413, 422)


def test_mcp(corpus: Corpus) -> None:
    settings = dataclasses.replace(
        corpus.settings, api_keys={KEY_A: corpus.tenant, KEY_B: f"{corpus.tenant}-nobody"}
    )
    client = TrajGraph(corpus.driver, database=corpus.db, embedder=HashEmbedder(256))
    server = build_server(settings, client, stdio_tenant="never-used")
    app = RequireBearer(server.streamable_http_app(), settings.api_keys)

    async def session_with(url: str, key: str, check: Any) -> None:
        http = create_mcp_http_client(headers={"authorization": f"Bearer {key}"})
        async with (
            http,
            streamable_http_client(url, http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            await check(session)

    async def ours(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "lessons" in tools and len(tools["lessons"].description or "") > 100
        result = await session.call_tool("lessons", {"error": SETTINGS_ERROR, "budget": 300})
        assert not result.is_error
        body = result.structured_content or json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert len(body["signatures"][0]["runs"]) == 7 and body["tokens"] <= 300
        me = run_id("13568")
        result = await session.call_tool("lessons", {"trajectory": me, "turn": 18})
        body = result.structured_content or json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert me not in body["signatures"][0]["runs"]
        bad = await session.call_tool("lessons", {})
        assert bad.is_error
        (message,) = bad.content
        assert isinstance(message, types.TextContent) and "Traceback" not in message.text

    async def theirs(session: ClientSession) -> None:
        result = await session.call_tool("lessons", {"error": SETTINGS_ERROR})
        body = result.structured_content or json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert body["signatures"] == []

    with serve_in_thread(app) as base:
        anyio.run(session_with, f"{base}/mcp", KEY_A, ours)
        anyio.run(session_with, f"{base}/mcp", KEY_B, theirs)


def test_signature_links_are_from_error_states_only(corpus: Corpus) -> None:
    n = corpus.count(
        "MATCH (s:State {tenant: $t})-[:HAS_SIGNATURE]->(:Signature) WHERE s.kind <> 'error' "
        "RETURN count(s) AS n",
        t=corpus.tenant,
    )
    assert n == 0
    # every resolution points at its signature, its failing turns and (when resolved) the re-run
    rows = corpus.driver.execute_query(
        "MATCH (r:Resolution {tenant: $t}) "
        "RETURN r.outcome AS outcome, COUNT { (r)-[:OF_SIGNATURE]->() } AS sig, "
        "COUNT { (r)-[:FAILED_AT]->() } AS failed, size(r.failed_turns) AS turns, "
        "COUNT { (r)-[:GOT_PAST_AT]->() } AS past",
        t=corpus.tenant,
        database_=corpus.db,
    ).records
    assert rows
    for r in rows:
        assert r["sig"] == 1 and r["failed"] == r["turns"]
        assert r["past"] == (1 if r["outcome"] == "resolved" else 0)
