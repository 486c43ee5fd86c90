"""The code sandbox: answers and touched turns, and every escape we know of failing safely."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trajgraph.queries import sandbox
from trajgraph.queries.sandbox import SandboxLimits, SandboxResult, run_python

TIGHT = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0, memory_mb=128)
# For the CPU-limit tests: a wall clock far away, so that on a busy machine (a child that gets
# a fraction of a core) the CPU limit is still the one that ends the run.
CPU_BOUND = SandboxLimits(cpu_seconds=1.0, wall_seconds=60.0, memory_mb=128)
ACTIONS = [
    "pytest -x",
    "ls -la",
    "pytest tests/unit",
    "cat setup.py",
    "pytest -k merge",
    "git diff",
]


def make_turns() -> list[dict[str, Any]]:
    # idx deliberately not the list position: touched_turns must report idx.
    return [
        {
            "idx": 10 + pos,
            "action": action,
            "observation": f"output of {action}",
            "thought": "",
            "reward": None,
            "timestamp": f"2024-05-01T10:00:0{pos}Z",
            "actor": "agent",
        }
        for pos, action in enumerate(ACTIONS)
    ]


def run(code: str, limits: SandboxLimits = TIGHT) -> SandboxResult:
    return run_python(textwrap.dedent(code), make_turns(), limits=limits)


def ok(code: str) -> Any:
    result = run(code)
    assert result.error is None, result.error
    return result.value


# --- answers and touched turns ------------------------------------------------------------


def test_count_reads_every_turn() -> None:
    result = run('result = sum(1 for t in turns if t["action"].startswith("pytest"))')
    assert result.error is None
    assert result.value == sum(1 for a in ACTIONS if a.startswith("pytest")) == 3
    assert result.touched_turns == [t["idx"] for t in make_turns()]
    assert 0 < result.seconds < TIGHT.wall_seconds


def test_filter_reports_only_the_turns_it_read() -> None:
    result = run('result = [t["action"] for t in turns[1:3]]')
    assert (result.value, result.touched_turns) == (["ls -la", "pytest tests/unit"], [11, 12])
    result = run('result = turns[4].get("observation")')
    assert (result.value, result.touched_turns) == ("output of pytest -k merge", [14])
    result = run('result = "action" in turns[5]')
    assert (result.value, result.touched_turns) == (True, [15])


def test_listing_keys_is_not_reading_the_turn() -> None:
    result = run("result = sorted(turns[0])")
    assert result.value == sorted(make_turns()[0])
    assert result.touched_turns == []


def test_value_of_the_last_expression_and_result_wins() -> None:
    assert ok("len(turns)") == len(ACTIONS)
    assert ok("result = 1\n2") == 1
    assert ok("print('hello')") == "hello\n"
    assert ok("x = 1") is None


def test_allowlisted_modules() -> None:
    assert ok("import re\nresult = re.findall(r'\\d+', 'a1b22')") == ["1", "22"]
    counted = ok(
        """
        import collections
        result = collections.Counter(t["action"].split()[0] for t in turns).most_common(1)
        """
    )
    assert counted == [["pytest", 3]]
    assert ok("from collections import defaultdict\nd = defaultdict(int)\nd['a'] += 1\nd") == {
        "a": 1
    }
    assert ok("import collections\nc = collections.Counter()\nc[turns[0]['actor']] += 2\nc") == {
        "agent": 2
    }
    assert ok("import math, statistics\n[math.sqrt(16), statistics.median([3, 1, 2])]") == [4, 2]
    assert ok("import itertools\nlist(itertools.islice(itertools.count(), 3))") == [0, 1, 2]
    assert ok("import json\njson.loads('{\"a\": [1]}')") == {"a": [1]}
    assert json.loads(ok("import json\njson.dumps(turns[0])")) == make_turns()[0]
    stamp = ok(
        """
        import datetime
        first = datetime.datetime.strptime(turns[0]["timestamp"], "%Y-%m-%dT%H:%M:%SZ")
        result = [first, first.strftime("%H:%M")]
        """
    )
    assert stamp == ["2024-05-01T10:00:00", "10:00"]


def test_non_json_values_are_converted() -> None:
    assert ok("{3, 1, 2}") == [1, 2, 3]
    assert ok("(1, 'a')") == [1, "a"]
    assert ok("{1: 'a', None: 'b'}") == {"1": "a", "null": "b"}
    assert ok("float('inf')") == "inf"
    assert ok("class A:\n    x = 1\nA()").startswith("<sandbox.A object at ")
    assert ok("result = turns[0]") == make_turns()[0]


def test_turns_are_read_only() -> None:
    assert "does not support item" in (run("turns[0]['action'] = 'rm -rf /'").error or "")


def test_errors_are_one_line() -> None:
    result = run("x = 1\nresult = 1 / 0")
    assert result.error == "ZeroDivisionError: division by zero (line 2)"
    assert run("result = turns[0]['nope']").error == "KeyError: 'nope' (line 1)"


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cpu_seconds must be positive"):
        SandboxLimits(cpu_seconds=0)


def test_compile_errors_need_no_child() -> None:
    result = run("result = (")
    assert (result.error or "").startswith("SyntaxError: ")
    assert result.seconds < 0.5
    assert "too long" in (run("x = 1\n" * 50_000).error or "")


# --- escapes: each must fail with an error and leave the parent alone --------------------

ESCAPES = {
    "import os": "import of 'os' is not allowed",
    "from os import system": "import of 'os' is not allowed",
    "import os.path": "import of 'os.path' is not allowed",
    "__import__('os')": '"__import__" is an invalid variable name',
    "import sys": "import of 'sys' is not allowed",
    "import builtins": '"builtins" is a reserved name',
    "import importlib": "import of 'importlib' is not allowed",
    "import pathlib": "import of 'pathlib' is not allowed",
    "import shutil": "import of 'shutil' is not allowed",
    "import subprocess": "import of 'subprocess' is not allowed",
    "import ctypes": "import of 'ctypes' is not allowed",
    "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))": "import of 'socket'",
    "import urllib.request": "import of 'urllib.request' is not allowed",
    "open('/etc/passwd').read()": "name 'open' is not defined",
    "exec('1')": "Exec calls are not allowed",
    "eval('1')": "Eval calls are not allowed",
    "compile('1', 'x', 'exec')": "name 'compile' is not defined",
    "().__class__.__bases__[0].__subclasses__()": "invalid attribute name",
    "getattr(turns, '__class__')": "attribute '__class__' is not allowed",
    "getattr(getattr(turns, 'append'), '__self__')": "attribute '__self__' is not allowed",
    "(lambda: 0).__globals__": '"__globals__" is an invalid attribute name',
    "__builtins__": '"__builtins__" is an invalid variable name',
    "(lambda: 0).__code__": '"__code__" is an invalid attribute name',
    "g = (i for i in [1])\ng.gi_frame": '"gi_frame" is a restricted name',
    "g = (i for i in [1])\ngetattr(g, 'gi_frame')": "attribute 'gi_frame' is not allowed",
    "'{0.__class__}'.format(1)": "format",
    "import collections\ncollections.UserString('{0.__class__}').format(1)": "'format'",
    "int.mro()": "attribute 'mro' is not allowed",
    # Allowlisted modules are views: their imported modules stay out of reach.
    "import statistics\nstatistics.sys.modules['os']": "has no attribute 'sys'",
    "import json\njson.codecs.open('/etc/passwd')": "has no attribute 'codecs'",
    "from collections import abc": "cannot import name 'abc'",
    "import collections\ncollections.namedtuple('P', 'x')": "no attribute 'namedtuple'",
    # Refusals are sticky: catching them does not turn an escape attempt into a success.
    "try:\n    import os\nexcept ImportError:\n    pass\nresult = 1": "import of 'os'",
    # Fork bombs: every route to fork/spawn goes through a module we refuse.
    "import os\nwhile True:\n    os.fork()": "import of 'os' is not allowed",
    "import multiprocessing": "import of 'multiprocessing' is not allowed",
    "import concurrent.futures": "import of 'concurrent.futures' is not allowed",
    "import pty": "import of 'pty' is not allowed",
    "import posix": "import of 'posix' is not allowed",
    "import _posixsubprocess": '"_posixsubprocess" is an invalid variable name',
    "import threading": "import of 'threading' is not allowed",
}


@pytest.mark.parametrize("code", list(ESCAPES))
def test_escape_fails(code: str) -> None:
    result = run(code)
    assert result.value is None
    assert result.error is not None and ESCAPES[code] in result.error, result.error
    assert "\n" not in result.error


def test_writing_files_fails(tmp_path: Path) -> None:
    target = tmp_path / "pwned.txt"
    for code in (
        f"open({str(target)!r}, 'w').write('x')",
        "import pathlib\npathlib.Path('pwned.txt').write_text('x')",
        f"import json\njson.dump({{}}, open({str(target)!r}, 'w'))",
    ):
        assert run(code).error is not None
    assert list(tmp_path.iterdir()) == []


def test_infinite_loop_hits_the_cpu_limit() -> None:
    result = run("while True:\n    pass", CPU_BOUND)
    assert result.error == "time limit exceeded"
    assert result.seconds < CPU_BOUND.wall_seconds


def test_regex_backtracking_hits_the_cpu_limit() -> None:
    code = "import re\nre.match('(a*)*b', 'a' * 40)"
    assert run(code, CPU_BOUND).error == "time limit exceeded"


def test_wall_clock_limit_kills_the_child() -> None:
    limits = SandboxLimits(cpu_seconds=30, wall_seconds=1.0)
    result = run("while True:\n    pass", limits)
    assert result.error == "time limit exceeded (wall clock 1 s)"
    assert result.seconds < 2.5


@pytest.mark.parametrize(
    "code",
    [
        "x = 'a' * (10**10)",
        "l = []\nwhile True:\n    l.append('x' * 10**6)",
        "l = [0]\nwhile True:\n    l = l + l",
    ],
)
def test_memory_bomb_hits_the_memory_limit(code: str) -> None:
    result = run(code)
    assert result.error == "memory limit exceeded"
    assert result.seconds < TIGHT.wall_seconds


def test_huge_output_is_refused() -> None:
    limits = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0, max_output_bytes=10_000)
    result = run("result = ['x' * 100] * 1000", limits)
    assert result.value is None
    assert (result.error or "").startswith("output too large (")


_USER_DICT = "import collections\nclass D(collections.UserDict):\n    def items(self):\n"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("        raise KeyError('boom')", "result could not be serialised: KeyError: 'boom'"),
        ("        raise SystemExit(1)", "result could not be serialised: SystemExit: 1"),
        ("        import os\n        return []", "import of 'os' is not allowed"),
        (
            "        try:\n            import os\n        except ImportError:\n"
            "            pass\n        return []",
            "import of 'os' is not allowed",
        ),
    ],
)
def test_the_results_own_methods_fail_as_the_code_would(body: str, says: str) -> None:
    # Serialising the result runs methods the code defined (a mapping's items()): what they
    # raise, or try, is the code's error, not the sandbox's failure.
    result = run(_USER_DICT + body + "\nresult = D(a=1)")
    assert result.value is None
    assert result.error == says


def test_parent_is_unaffected_after_escapes(tmp_path: Path) -> None:
    cwd, pid = os.getcwd(), os.getpid()
    for code in ("import os\nos.fork()", "x = 'a' * (10**10)", "while True:\n    pass"):
        assert run(code).error is not None
    assert (os.getcwd(), os.getpid()) == (cwd, pid)
    assert _live_children(pid) == []
    assert list(tmp_path.iterdir()) == []
    assert ok('sum(1 for t in turns if "pytest" in t["action"])') == 3


def _live_children(pid: int) -> list[int]:
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    children = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            children.append(int(stat.parent.name))
    return children


# --- the child's own hardening, tested without the RestrictedPython layer ----------------

_HARDENED_PROBE = """
import importlib.util, json, os, resource, socket, sys
spec = importlib.util.spec_from_file_location("probe_sandbox", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module._load_modules()
module._harden(module.SandboxLimits(cpu_seconds=1), compile("pass", "probe", "exec"))

def fork():
    if os.fork() == 0:
        os._exit(0)

outcomes = {}
for name, attempt in {
    "fork": fork,
    "system": lambda: os.system("true"),
    "read": lambda: open("/etc/hostname").read(),
    "write": lambda: open("pwned.txt", "w"),
    "socket": lambda: socket.socket().connect(("127.0.0.1", 9)),
    "import": lambda: __import__("xml.dom"),
    "exec": lambda: exec("1"),
    "frame": lambda: sys._getframe(),
    "setrlimit": lambda: resource.setrlimit(resource.RLIMIT_NPROC, (100, 100)),
}.items():
    try:
        attempt()
        outcomes[name] = "allowed"
    except BaseException as exc:
        outcomes[name] = f"{type(exc).__name__}: {exc}"
outcomes["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)
outcomes["fsize"] = resource.getrlimit(resource.RLIMIT_FSIZE)
outcomes["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)
outcomes["euid"] = os.geteuid()
os.write(1, json.dumps(outcomes).encode())
os._exit(0)
"""


def test_child_hardening_refuses_escapes_even_past_restrictedpython(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HARDENED_PROBE, sandbox.runner.CHILD_FILE],
        capture_output=True,
        cwd=tmp_path,
        timeout=10,
        start_new_session=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    outcomes = json.loads(done.stdout)
    for name in ("fork", "system", "read", "write", "socket", "import", "exec", "frame"):
        assert "is not allowed" in outcomes[name], (name, outcomes[name])
    assert "setrlimit" in outcomes["setrlimit"]
    assert outcomes["nproc"] == [0, 0]
    assert outcomes["fsize"] == [0, 0]
    assert outcomes["nofile"] == [3, 3]
    if os.geteuid() == 0:
        assert outcomes["euid"] != 0
    assert list(tmp_path.iterdir()) == []


def test_the_child_loads_a_small_self_contained_module() -> None:
    """The locked-down process loads child.py alone: no trajgraph, no subprocess or threads."""
    tree = ast.parse(Path(sandbox.runner.CHILD_FILE).read_text("utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"RestrictedPython"}
    assert imported <= allowed, imported - allowed
    assert not imported & {"trajgraph", "subprocess", "threading", "selectors", "tempfile"}
