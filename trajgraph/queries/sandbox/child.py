"""The sandbox's child side: the only module the locked-down process loads.

It is self-contained on purpose (the standard library and RestrictedPython, nothing of
trajgraph, no subprocess or threading): the parent (runner.py) starts a fresh interpreter with
`-I -S -B` that loads this file by path and calls `child_main()`, which reads one request on
stdin, hardens the process, runs the code and writes one JSON reply. runner.py imports it too,
for `SandboxLimits` and the compile step both sides share.
"""

from __future__ import annotations

import ast
import builtins
import collections
import copy
import datetime
import json
import math
import operator
import os
import signal
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from RestrictedPython import compile_restricted_exec
from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safe_builtins,
    safer_getattr,
)
from RestrictedPython.PrintCollector import PrintCollector
from RestrictedPython.transformer import INSPECT_ATTRIBUTES

ALLOWED_MODULES = ("re", "math", "statistics", "collections", "itertools", "json", "datetime")
# fmt: off
EXTRA_BUILTINS = (
    "len", "sum", "min", "max", "sorted", "any", "all", "enumerate", "range", "zip", "list",
    "dict", "set", "frozenset", "tuple", "str", "int", "float", "bool", "abs", "round",
    "isinstance", "map", "filter", "reversed",
)
# fmt: on
MAX_CODE_CHARS = 100_000
REPR_CHARS = 200
FILENAME = "<sandbox>"
# Bound to the value of a trailing expression statement; a plain name because RestrictedPython
# rejects `_`-prefixed ones, and harmless if the code reads it.
LAST_VALUE = "sandbox_last_value"

# Stdlib modules the allowlisted ones import lazily (Counter.most_common -> heapq,
# datetime.strptime -> _strptime, UserDict.copy -> copy): loaded before the audit hook
# starts refusing imports.
_LAZY_HELPERS = ("heapq", "_strptime", "copy", "bisect", "fractions", "decimal", "random")
# Public members that would run code through compile/exec (refused by the audit hook anyway).
_HIDDEN_MEMBERS = frozenset({"namedtuple"})
# format/format_map: str.format-style "{0.__class__}" traversal reads any attribute, and
# UserString has them too, so they are refused on every object; mro: the way to `object`.
_REFUSED_ATTRIBUTES = INSPECT_ATTRIBUTES | {"format", "format_map", "mro"}
_REFUSED_VALUES = (types.ModuleType, types.FrameType, types.CodeType, types.TracebackType)
_NOBODY = 65534
_MIB = 1024 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    # CPU time of the code (ITIMER_PROF, to the millisecond; RLIMIT_CPU one second later).
    cpu_seconds: float = 2.0
    # Wall clock of the whole child, start-up included: the parent kills its process group.
    wall_seconds: float = 5.0
    # RLIMIT_AS: this much address space on top of the child's footprint with the turns
    # loaded, so a long trajectory does not eat into the code's budget.
    memory_mb: int = 256
    # Size of the result JSON.
    max_output_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        # Zero would switch the CPU timer off rather than allow nothing.
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")


def compile_code(code: str) -> tuple[types.CodeType | None, str | None]:
    """RestrictedPython-compile `code`; (code object, None) or (None, one-line reason)."""
    if not isinstance(code, str):
        return None, "code must be a string"
    if len(code) > MAX_CODE_CHARS:
        return None, f"code too long ({len(code)} characters, at most {MAX_CODE_CHARS})"
    try:
        compiled = compile_restricted_exec(_parse(code), filename=FILENAME)
    except SyntaxError as exc:
        return None, f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return None, f"code could not be compiled: {type(exc).__name__}: {_one_line(exc)}"
    if compiled.errors:
        more = f" (+{len(compiled.errors) - 1} more)" if len(compiled.errors) > 1 else ""
        return None, _one_line(compiled.errors[0]) + more
    return compiled.code, None


def _parse(code: str) -> ast.Module:
    tree = _SubscriptAugAssign().visit(ast.parse(code, FILENAME, "exec"))
    assert isinstance(tree, ast.Module)
    return _capture_last_expression(tree)


class _SubscriptAugAssign(ast.NodeTransformer):
    """`counts[k] += 1` -> `counts[k] = counts[k] + 1`, which RestrictedPython then guards.

    RestrictedPython refuses augmented item assignment outright, yet it is how analysis code
    counts things. Only for side-effect-free targets (names, constants, attribute and item
    reads), since the target is evaluated twice; the result is a new object, not in place.
    """

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        if not isinstance(node.target, ast.Subscript) or not _is_plain(node.target):
            return node
        # A copy: RestrictedPython rewrites nodes in place, so the two sides must not share any.
        read = ast.Subscript(
            copy.deepcopy(node.target.value), copy.deepcopy(node.target.slice), ast.Load()
        )
        assign = ast.Assign(targets=[node.target], value=ast.BinOp(read, node.op, node.value))
        return ast.fix_missing_locations(ast.copy_location(assign, node))


def _is_plain(node: ast.expr) -> bool:
    plain = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Load, ast.Store)
    return all(isinstance(child, plain) for child in ast.walk(node))


def _capture_last_expression(tree: ast.Module) -> ast.Module:
    # `x` as the last statement means "the answer is x", like a notebook cell.
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        assign = ast.Assign(targets=[ast.Name(LAST_VALUE, ast.Store())], value=last.value)
        tree.body[-1] = ast.copy_location(assign, last)
        ast.fix_missing_locations(tree)
    return tree


# ---------------------------------------------------------------------------------------------
# Runs only in the process started by runner._spawn.


class _TurnView(Mapping[str, Any]):
    """A read-only turn; reading any field records the turn's idx."""

    __slots__ = ("_data", "_idx", "_touched")

    def __init__(self, data: dict[str, Any], idx: int, touched: set[int]) -> None:
        self._data = data
        self._idx = idx
        self._touched = touched

    def __getitem__(self, key: str) -> Any:
        self._touched.add(self._idx)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        self._touched.add(self._idx)
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        self._touched.add(self._idx)
        return f"Turn({self._data!r})"


class _State:
    """Child-global guard state; unreachable from the code (no `_` names, no module access)."""

    armed = False
    code: types.CodeType | None = None
    violations: list[str] = []  # noqa: RUF012 - one process, one run


def _refuse(message: str, exc_type: type[Exception]) -> Exception:
    if len(_State.violations) < 8:
        _State.violations.append(message)
    return exc_type(message)


def child_main() -> None:
    """Entry point of the child: read the request, harden, run, write one JSON reply."""
    request = json.loads(sys.stdin.buffer.read())
    limits = SandboxLimits(**request["limits"])
    modules = _load_modules()
    code, error = compile_code(request["code"])
    touched: set[int] = set()
    if code is None:
        _reply(None, touched, error or "code could not be compiled", limits)
    env = _environment(modules, request["turns"], touched)
    _harden(limits, code)
    value, error = _execute(code, env)
    _reply(value, touched, error, limits)


def _load_modules() -> dict[str, _ModuleView]:
    for name in _LAZY_HELPERS:
        __import__(name)
    views = {name: _ModuleView(__import__(name)) for name in ALLOWED_MODULES}
    views["json"].__dict__["dumps"] = _json_dumps
    return views


def _json_dumps(obj: Any, **kwargs: Any) -> str:
    # Turns are mappings, not dicts: let json.dumps(turn) work as it would on the raw turn.
    kwargs.setdefault("default", _turn_as_dict)
    return json.dumps(obj, **kwargs)


def _turn_as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, _TurnView):
        return dict(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


class _ModuleView:
    """The public, non-module members of an allowlisted module, never the module itself.

    `from m import x` reads attributes without going through _getattr_, so what the code can
    reach must be curated here (`statistics.sys`, `json.codecs.open` are left out). There is
    no __name__, so `from collections import abc` cannot fall back to sys.modules either.
    """

    def __init__(self, module: types.ModuleType) -> None:
        self.__dict__.update(
            {
                name: value
                for name, value in vars(module).items()
                if not name.startswith("_")
                and name not in _HIDDEN_MEMBERS
                and not isinstance(value, types.ModuleType)
                and type(value).__name__ != "PyCapsule"
            }
        )
        self.__dict__["_view_of"] = module.__name__

    def __getattr__(self, name: str) -> Any:  # only reached for members left out
        raise AttributeError(f"module {self._view_of!r} has no attribute {name!r} in the sandbox")

    def __repr__(self) -> str:
        return f"<module {self._view_of!r} (sandbox view)>"


def _environment(
    modules: dict[str, _ModuleView], turns: list[dict[str, Any]], touched: set[int]
) -> dict[str, Any]:
    views = [
        _TurnView(turn, turn["idx"] if isinstance(turn.get("idx"), int) else pos, touched)
        for pos, turn in enumerate(turns)
    ]
    return {
        "__builtins__": _builtins(modules),
        "__name__": "sandbox",
        "__metaclass__": type,
        "_getattr_": _guarded_getattr,
        "_getitem_": operator.getitem,
        "_getiter_": iter,
        "_write_": _write_guard,
        "_inplacevar_": _inplacevar,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_apply_": _apply,
        "_print_": PrintCollector,
        "turns": views,
    }


def _builtins(modules: dict[str, _ModuleView]) -> dict[str, Any]:
    allowed = dict(safe_builtins)
    allowed.pop("id", None)  # leaks addresses and raises an audit event
    allowed.update({name: getattr(builtins, name) for name in EXTRA_BUILTINS})
    allowed["getattr"] = _guarded_getattr
    allowed["__import__"] = _make_import(modules)
    return allowed


def _make_import(modules: dict[str, _ModuleView]) -> Callable[..., Any]:
    def restricted_import(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> _ModuleView | None:
        if level == 0 and name in modules:
            return modules[name]
        # C code (datetime.strptime -> _strptime, strftime -> time) imports through the
        # current frame's __import__ with a list fromlist, which compiled code never passes,
        # then reads sys.modules itself: let it, without handing anything to the code.
        if level == 0 and type(fromlist) is list and name in sys.modules:
            return None
        raise _refuse(f"import of {name!r} is not allowed", ImportError)

    return restricted_import


_MISSING = object()


def _guarded_getattr(obj: Any, name: str, default: Any = _MISSING) -> Any:
    if not isinstance(name, str):
        raise TypeError("attribute name must be a string")
    if name.startswith("_") or name in _REFUSED_ATTRIBUTES:
        raise _refuse(f"attribute {name!r} is not allowed", AttributeError)
    # RestrictedPython's own checks too, in case its rules grow beyond ours. (Its
    # safer_getattr_raise would handle a missing default for us, but only from 7.4 on.)
    value = safer_getattr(obj, name, default)
    if value is _MISSING:
        value = getattr(obj, name)  # raises the object's own AttributeError
    if isinstance(value, _REFUSED_VALUES):
        raise _refuse(f"attribute {name!r} is not allowed", AttributeError)
    return value


# Containers the code builds itself (a Counter, a defaultdict) take item writes; everything
# else (turns, module views, classes) goes through RestrictedPython's refusing wrapper.
_WRITABLE = (dict, list, set, collections.deque, collections.UserDict, collections.UserList)


def _write_guard(obj: Any) -> Any:
    return obj if isinstance(obj, _WRITABLE) else full_write_guard(obj)


_INPLACE_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "@=": operator.imatmul,
}


def _inplacevar(op: str, target: Any, value: Any) -> Any:
    return _INPLACE_OPERATORS[op](target, value)


def _apply(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def _harden(limits: SandboxLimits, code: types.CodeType) -> None:
    """Drop privileges, set rlimits, then arm the audit hook; nothing can be undone after."""
    import resource

    _drop_root()
    # RLIMIT_CPU counts whole seconds since start-up: a backstop for the profiling timer below.
    cpu_used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    cpu = math.ceil(cpu_used + limits.cpu_seconds) + 1
    _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _set_limit(resource.RLIMIT_AS, _address_space() + limits.memory_mb * _MIB)
    _set_limit(resource.RLIMIT_NPROC, 0)
    _set_limit(resource.RLIMIT_FSIZE, 0)
    _set_limit(resource.RLIMIT_NOFILE, 3)  # stdin, stdout, stderr: nothing new
    _set_limit(resource.RLIMIT_CORE, 0)
    # Ignored signals survive exec: make sure the CPU limits' signals do end the process.
    for signum in (signal.SIGPROF, signal.SIGXCPU):
        signal.signal(signum, signal.SIG_DFL)
    # Showing a warning would read source lines through linecache: noise, and an open().
    warnings.simplefilter("ignore")
    _State.code = code
    sys.addaudithook(_audit)
    _State.armed = True
    # CPU time of the code alone, to the millisecond; SIGPROF's default action ends the process
    # and the code has no way to reach the signal module to change that.
    signal.setitimer(signal.ITIMER_PROF, limits.cpu_seconds)


def _drop_root() -> None:
    # RLIMIT_NPROC does not bind root; `nobody` also cannot read most of the file system.
    if os.geteuid() != 0:
        return
    try:
        os.setgroups([])
        os.setgid(_NOBODY)
        os.setuid(_NOBODY)
    except OSError:
        pass  # e.g. a user namespace without that id: the other layers still hold


def _address_space() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _set_limit(which: int, soft: int, hard: int | None = None) -> None:
    import resource

    hard = soft if hard is None else hard
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Deny by default: the only expected event once armed is running the compiled code.
    if not _State.armed or (event == "exec" and args and args[0] is _State.code):
        return
    if event == "import":
        raise _refuse(f"import of {args[0]!r} is not allowed", PermissionError)
    raise _refuse(f"operation {event!r} is not allowed", PermissionError)


def _execute(code: types.CodeType, env: dict[str, Any]) -> tuple[Any, str | None]:
    try:
        exec(code, env)  # the RestrictedPython-compiled code, with guarded globals
        return _answer(env), None
    except MemoryError:
        env.clear()
        return None, "memory limit exceeded"
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are the code's too
        return None, _describe_error(exc)


def _answer(env: dict[str, Any]) -> Any:
    if "result" in env:
        return env["result"]
    if env.get(LAST_VALUE) is not None:
        return env[LAST_VALUE]
    printed = env.get("_print")
    return printed() if isinstance(printed, PrintCollector) and printed() else None


def _describe_error(exc: BaseException) -> str:
    # The frame after our exec() is the code's top level: report the statement that failed.
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    where = f" (line {tb.tb_lineno})" if tb is not None else ""
    message = _one_line(exc)
    return f"{type(exc).__name__}: {message}{where}" if message else type(exc).__name__ + where


def _one_line(exc: object) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 1] + "…"


def _reply(value: Any, touched: set[int], error: str | None, limits: SandboxLimits) -> NoReturn:
    body = "null"
    if error is None and not _State.violations:
        body, error = _serialise(value, limits)
    if _State.violations:  # refused while the code ran, or while its result's methods did
        body, error = "null", _State.violations[0]
    signal.setitimer(signal.ITIMER_PROF, 0)  # the answer is in: don't die while writing it
    touched_json, error_json = json.dumps(sorted(touched)), json.dumps(error)
    reply = f'{{"value": {body}, "touched": {touched_json}, "error": {error_json}}}'
    _write_all(reply.encode())
    os._exit(0)  # skip interpreter teardown: nothing the code left behind runs after this


def _serialise(value: Any, limits: SandboxLimits) -> tuple[str, str | None]:
    try:
        body = json.dumps(_jsonable(value), allow_nan=False)
    except MemoryError:
        return "null", "memory limit exceeded"
    except (ValueError, TypeError, RecursionError) as exc:
        return "null", f"result could not be serialised: {_one_line(exc)}"
    except BaseException as exc:  # the code's own methods (a mapping's items()) raised it
        return "null", f"result could not be serialised: {type(exc).__name__}: {_one_line(exc)}"
    if len(body) > limits.max_output_bytes:
        return "null", f"output too large ({len(body)} bytes > {limits.max_output_bytes})"
    return body, None


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-compatible copy of `value`; unknown objects become a truncated repr."""
    if value is None or type(value) in (str, bool, int):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else repr(value)
    if depth > 100:
        return _short_repr(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {_json_key(key): _jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple, collections.deque)):
        return [_jsonable(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [_jsonable(item, depth + 1) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return _short_repr(value)


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return str(key)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return _short_repr(key)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 1] + "…"
