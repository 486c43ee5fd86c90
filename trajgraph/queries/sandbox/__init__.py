"""Sandboxed Python over one trajectory's turns: `run_python(code, turns)`.

runner.py starts and supervises the child process; child.py is all the child loads.
"""

from trajgraph.queries.sandbox.child import MAX_CODE_CHARS, SandboxLimits, compile_code
from trajgraph.queries.sandbox.runner import SandboxResult, run_python

__all__ = ["MAX_CODE_CHARS", "SandboxLimits", "SandboxResult", "compile_code", "run_python"]
