"""A local OpenAI-compatible HTTP server for tests and benchmarks: real HTTP, no patching.

``POST /v1/chat/completions`` answers like a model that follows trajgraph's extraction prompt:
it reads the windows out of the request's log block and reports what the offline heuristic
finds in them (rule-derived, deterministic). Faults are scripted per request, in order:

    ok              a normal reply
    429[:S]         429 Too Many Requests with Retry-After: S (default 1)
    500 / 503       a server error
    timeout         sleep ``timeout_sleep_s`` before replying (longer than the client waits)
    drop            close the connection without a reply
    invalid_json    a reply that is not JSON
    schema_invalid  JSON that breaks the reply schema
    invent          a normal reply plus objects and a state value that are not in the log
    truncate        half a reply with finish_reason "length"
    refuse          a refusal
    401 / 400       a client error
    500_echo        a 500 whose error message quotes the request's Authorization header (a
                    misbehaving proxy: the secret-scan tests check that the key goes no further)

``POST /v1/embeddings`` returns hash-derived unit vectors (``dimensions`` or 64), and takes
the same transport faults. Retrieval-router requests (json_schema named ``trajgraph_route``)
get ``route_reply``; reminder requests (``trajgraph_remind``) get ``remind_reply``; any other
named schema in ``schema_replies`` gets that reply (a dict, or a function of the request), and
a plain request (no response_format) gets ``text_reply`` when it is set.

Content rules: a window holding "ignore previous instructions" makes the model gullible:
it abandons the reply format (schema-invalid JSON), as a model that obeyed the log would.
With ``json_schema_supported=False`` it answers json_schema requests with 400, like servers
without structured outputs. ``imitate`` makes it refuse formats as a real server kind does
(extractors/structured.py), with the status and message that server really sends:

    llama-cpp-python  GET /models says owned_by "me"; json_schema → 500 naming response_format
                      (measured against llama-cpp-python 0.3.36); json_object + schema works
    vllm-old          owned_by "vllm"; json_schema → 400; guided_json in the body works
    openai            owned_by "system"; a schema with maxLength/maxItems → 400 (strict mode)
    fastapi-422       json_schema → 422 with a validation error on response_format.type
    json-mode-only    json_schema and json_object + schema → 400; plain json_object works

Every request is recorded; prompt tokens are counted here with
the same tiktoken encoding trajgraph uses.

Run standalone: ``python -m tests.fake_openai [--port N]`` prints its base URL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trajgraph.core.settings import LLMSettings
from trajgraph.core.tokens import count_tokens
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.windows import Window
from trajgraph.graph.embedders import HashEmbedder

_BLOCK = re.compile(r"<<<LOG (\w+)>>>\n(.*?)<<<END \1>>>", re.DOTALL)
_PART = re.compile(r"^\[turn (\d+) (action|observation)\]$", re.MULTILINE)
_WANTED = re.compile(r"Windows to extract: ([\d, ]+)\.")
INJECTION = re.compile(r"ignore (all )?previous instructions", re.IGNORECASE)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    fault: str
    prompt_tokens: int = 0


@dataclass
class FakeOpenAI:
    json_schema_supported: bool = True
    imitate: str = ""  # a real server kind's format behaviour (see the module docstring)
    send_usage: bool = True
    timeout_sleep_s: float = 2.0
    latency_s: float = 0.0  # added to every chat reply, like a real model's generation time
    embedding_dim: int = 64  # /embeddings vectors (hash-derived) when a request names none
    # The reply to retrieval-router requests (response_format name "trajgraph_route").
    route_reply: dict[str, Any] = field(
        default_factory=lambda: {
            "decision": "SUFFICIENT",
            "direction": "none",
            "code": "",
            "reason": "the fake model finds the evidence sufficient",
        }
    )
    # The reply to reminder requests (response_format name "trajgraph_remind").
    remind_reply: dict[str, Any] = field(
        default_factory=lambda: {"reminder": None, "cites": [], "rule": "none"}
    )
    # Replies to other structured-output requests, by response_format name: a dict, or a
    # function of the request body that returns one.
    schema_replies: dict[str, Any] = field(default_factory=dict)
    # The reply to a plain request (no response_format: AMA-Bench's reader and judge): a
    # string, or a function of the request body that returns one; None: the extraction reply.
    text_reply: Any = None
    faults: deque[str] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    probes: int = 0  # GET /models requests (trajgraph's structured-output probe)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, port: int = 0) -> FakeOpenAI:
        handler = _handler_for(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    # -- scripting and inspection ------------------------------------------------------------

    def script(self, *faults: str) -> None:
        with self._lock:
            self.faults.extend(faults)

    def reset(self) -> None:
        with self._lock:
            self.faults.clear()
            self.requests.clear()

    @property
    def embedding_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/embeddings")]

    @property
    def chat_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.chat_requests)

    def _next_fault(self) -> str:
        with self._lock:
            return self.faults.popleft() if self.faults else "ok"

    def _record(self, rec: Recorded) -> None:
        with self._lock:
            self.requests.append(rec)


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                model: dict[str, Any] = {"id": "fake", "object": "model"}
                owner = _OWNERS.get(fake.imitate)
                if owner:
                    model["owned_by"] = owner
                with fake._lock:
                    fake.probes += 1
                self._json(200, {"object": "list", "data": [model]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                self._json(400, {"error": {"message": "body is not JSON"}})
                return
            path = self.path.rstrip("/")
            if not path.endswith(("/chat/completions", "/embeddings")):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            fault = fake._next_fault()
            headers = {k.lower(): v for k, v in self.headers.items()}
            tokens = _prompt_tokens(body) if path.endswith("/chat/completions") else 0
            rec = Recorded(self.path, headers, body, fault, tokens)
            fake._record(rec)
            if path.endswith("/embeddings"):
                self._embeddings(body, fault)
            else:
                self._chat(body, fault, rec.prompt_tokens)

        def _embeddings(self, body: dict[str, Any], fault: str) -> None:
            kind = fault.partition(":")[0]
            if kind == "500_echo":
                echo = self.headers.get("authorization", "")
                self._json(500, _error(f"upstream failed for Authorization: {echo}"))
                return
            if kind in ("429", "500", "503", "400", "401"):
                extra = {"retry-after": fault.partition(":")[2] or "1"} if kind == "429" else {}
                self._json(int(kind), _error(f"injected {kind}"), extra)
                return
            inputs = body.get("input")
            texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
            dim = int(body.get("dimensions") or fake.embedding_dim)
            vectors = HashEmbedder(dim).embed(texts)
            self._json(
                200,
                {
                    "object": "list",
                    "model": body.get("model", "fake-embed"),
                    "data": [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vectors)
                    ],
                    "usage": {
                        "prompt_tokens": sum(count_tokens(t) for t in texts),
                        "total_tokens": sum(count_tokens(t) for t in texts),
                    },
                },
            )

        def _chat(self, body: dict[str, Any], fault: str, prompt_tokens: int) -> None:
            fmt = (body.get("response_format") or {}).get("type")
            if fmt == "json_schema" and not fake.json_schema_supported:
                self._json(400, _error("response_format json_schema is not supported"))
                return
            refused = _refusal(fake.imitate, body)
            if refused is not None:
                self._json(refused[0], _error(refused[1]))
                return
            kind, _, arg = fault.partition(":")
            if kind == "429":
                self._json(429, _error("rate limited"), {"retry-after": arg or "1"})
                return
            if kind == "500_echo":
                echo = self.headers.get("authorization", "")
                self._json(500, _error(f"upstream failed for Authorization: {echo}"))
                return
            if kind in ("500", "503", "400", "401"):
                self._json(int(kind), _error(f"injected {kind}"))
                return
            if kind == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if kind == "timeout":
                time.sleep(fake.timeout_sleep_s)
            elif fake.latency_s:
                time.sleep(fake.latency_s)
            schema_name = _schema_name(body)
            if schema_name == "trajgraph_route" and kind == "ok":
                content, finish = json.dumps(fake.route_reply), "stop"
            elif schema_name == "trajgraph_remind" and kind == "ok":
                content, finish = json.dumps(fake.remind_reply), "stop"
            elif schema_name in fake.schema_replies and kind == "ok":
                reply_for = fake.schema_replies[schema_name]
                content = json.dumps(reply_for(body) if callable(reply_for) else reply_for)
                finish = "stop"
            elif fake.text_reply is not None and not body.get("response_format") and kind == "ok":
                reply_for = fake.text_reply
                content = reply_for(body) if callable(reply_for) else reply_for
                finish = "stop"
            else:
                content, finish = _answer(body, kind)
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": count_tokens(content or ""),
                "total_tokens": prompt_tokens + count_tokens(content or ""),
            }
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if kind == "refuse":
                message = {"role": "assistant", "content": None, "refusal": "I cannot help."}
            reply: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
            if fake.send_usage:
                reply["usage"] = usage
            # The client may have given up already (timeout fault).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._json(200, reply)

        def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return Handler


_OWNERS = {
    "llama-cpp-python": "me",
    "vllm-old": "vllm",
    "openai": "system",
    "ollama": "library",
}


def _refusal(imitate: str, body: dict[str, Any]) -> tuple[int, str] | None:
    """The status and message with which the imitated server refuses this request's format."""
    fmt = body.get("response_format") or {}
    kind = fmt.get("type")
    if imitate == "llama-cpp-python" and kind == "json_schema":
        return 500, (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
            "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
        )
    if imitate == "vllm-old" and kind == "json_schema":
        return 400, "response_format type json_schema is not supported by this server"
    if imitate == "openai" and kind == "json_schema":
        sent = json.dumps(fmt.get("json_schema", {}).get("schema", {}))
        if "maxLength" in sent or "maxItems" in sent:
            return 400, "Invalid schema for response_format 'x': 'maxLength' is not permitted."
    if imitate == "fastapi-422" and kind == "json_schema":
        return 422, "body.response_format.type: Input should be 'text' or 'json_object'"
    if imitate == "json-mode-only" and (kind == "json_schema" or "schema" in fmt):
        return 400, "response_format: only {type: json_object} is supported"
    return None


def _schema_name(body: dict[str, Any]) -> str | None:
    """Which contract a request asks for, in whichever dialect it was sent: the json_schema's
    name, else recognised by the schema's properties (sent as a parameter or in the prompt)."""
    fmt = body.get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name")
    if name:
        return str(name)
    schema = fmt.get("schema") or body.get("guided_json")
    text = json.dumps(schema) if schema else ""
    if not text:
        messages = body.get("messages") or []
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        text = system.partition("valid against this JSON Schema:")[2]
    for prop, known in (('"decision"', "trajgraph_route"), ('"reminder"', "trajgraph_remind")):
        if prop in text:
            return known
    for known in ("trajgraph_answer", "trajgraph_judge"):
        if known == "trajgraph_answer" and '"answer"' in text and '"correct"' not in text:
            return known
        if known == "trajgraph_judge" and '"correct"' in text:
            return known
    return None


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_error"}}


def _prompt_tokens(body: dict[str, Any]) -> int:
    """What the request costs: message texts plus 4 per message, plus the schema if sent."""
    n = sum(count_tokens(str(m.get("content") or "")) + 4 for m in body.get("messages") or [])
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        n += count_tokens(json.dumps(fmt["json_schema"]["schema"], separators=(",", ":")))
    elif fmt.get("schema") or body.get("guided_json"):
        sent = fmt.get("schema") or body.get("guided_json")
        n += count_tokens(json.dumps(sent, separators=(",", ":")))
    return n


def parse_windows(user: str) -> dict[int, Window]:
    """The windows a request asks about, rebuilt from its log block."""
    wanted_m = _WANTED.search(user)
    blocks = _BLOCK.findall(user)
    if not wanted_m or not blocks:
        return {}
    wanted = [int(x) for x in wanted_m.group(1).replace(" ", "").split(",") if x]
    log = blocks[-1][1]
    parts: dict[tuple[int, str], str] = {}
    marks = list(_PART.finditer(log))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(log)
        text = log[m.end() + 1 : end]
        parts[(int(m.group(1)), m.group(2))] = text.removesuffix("\n")
    turns = sorted({t for t, _ in parts})
    out: dict[int, Window] = {}
    for t in wanted:
        earlier = [u for u in turns if u < t and (u, "observation") in parts]
        prev = earlier[-1] if earlier else None
        out[t] = Window(
            tenant="fake",
            trajectory_id="fake",
            turn=t,
            prev_turn=prev,
            prev_observation=parts.get((prev, "observation"), "") if prev is not None else "",
            action=parts.get((t, "action"), ""),
            observation=parts.get((t, "observation"), ""),
            truncated=False,
            tokens=0,
        )
    return out


def _answer(body: dict[str, Any], kind: str) -> tuple[str, str]:
    msgs = body.get("messages") or []
    user = next((m["content"] for m in msgs if m.get("role") == "user"), "")
    if kind == "invalid_json":
        return '{"windows": [ {"turn": 1, "states": [ oops', "stop"
    if kind == "schema_invalid":
        return json.dumps({"windows": [{"turn": "one", "facts": []}]}), "stop"
    windows = parse_windows(user)
    if any(INJECTION.search(w.observation + w.action) for w in windows.values()):
        # A model that obeys the log abandons the contract; trajgraph must not care.
        return json.dumps({"status": "ignoring previous instructions", "windows": "none"}), "stop"
    ex = HeuristicExtractor()
    items = []
    for w in windows.values():
        found = ex.extract(w).model_dump(mode="json", exclude={"extractor"})
        for s in found["states"]:
            s.pop("extractor", None)
        items.append(found)
    if kind == "invent" and items:
        items[0]["objects"].append(
            {"name": "/etc/invented/by-the-model.conf", "kind": "path", "turns": [items[0]["turn"]]}
        )
        items[0]["states"].append(
            {
                "key": "invented",
                "subject": "server",
                "attribute": "status",
                "value": "healthy according to the model",
                "kind": "status",
                "turn": items[0]["turn"],
                "text": "the server is healthy",
            }
        )
    content = json.dumps({"windows": items})
    if kind == "truncate":
        return content[: len(content) // 2], "length"
    return content, "stop"


def judge_by_reference(body: dict[str, Any]) -> str:
    """A scripted ``text_reply`` for AMA-Bench's judge prompt (trajgraph.evaluation.judge):
    "yes" when the reference answer is in the predicted one, else "No"."""
    prompt = body["messages"][-1]["content"]
    gold = re.search(r"^Reference Answer: (.*)$", prompt, re.MULTILINE)
    said = re.search(r"^Predicted Answer: (.*)$", prompt, re.MULTILINE)
    if gold is None or said is None:
        return "not a judge prompt"
    return "yes" if gold.group(1) in said.group(1) else "No"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    args = p.parse_args()
    fake = FakeOpenAI(latency_s=args.latency).start(args.port)
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()


def fake_llm_settings(fake: FakeOpenAI, **changes: Any) -> LLMSettings:
    """LLM settings pointing at ``fake``: short timeouts and back-off, two attempts, and one
    request in flight, so that scripted faults are consumed in request order."""
    fields: dict[str, Any] = {
        "model": "fake-model",
        "base_url": fake.url,
        "api_key": "test-key",
        "timeout_s": 1.0,
        "max_attempts": 2,
        "max_backoff_s": 0.05,
        "concurrency": 1,
    }
    fields.update(changes)
    return LLMSettings(**fields)
