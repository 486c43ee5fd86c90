"""Reading deploy/locks/ (requirements files with exact versions and hashes, written by
`bash deploy/dev.sh lock`), for the tests that tie the locks to pyproject.toml, the Dockerfile
and the code's own pins."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from tests.paths import REPO

LOCKS = REPO / "deploy" / "locks"
# A requirement line of uv's output: `name==version ; marker \` (the marker is optional).
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\?$")


@dataclass(frozen=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    marker: str | None  # a universal lock forks some packages by Python version
    hashes: int  # the --hash lines that follow it


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def pins(lock: str) -> tuple[Pin, ...]:
    """Every pinned requirement of deploy/locks/<lock>, in file order."""
    out: list[Pin] = []
    for line in (LOCKS / lock).read_text("utf-8").splitlines():
        m = _PIN.match(line)
        if m:
            marker = m[3].strip() if m[3] else None
            out.append(Pin(normalize(m[1]), m[2], marker, 0))
        elif line.strip().startswith("--hash=sha256:") and out:
            last = out[-1]
            out[-1] = Pin(last.name, last.version, last.marker, last.hashes + 1)
    return tuple(out)


def locked_versions(lock: str) -> dict[str, str]:
    """name -> version for the pins with no marker (the one version every Python of the lock
    gets); forked pins are left out."""
    return {p.name: p.version for p in pins(lock) if p.marker is None}
