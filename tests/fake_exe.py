"""Stand-in executables for the tests of code that finds and runs external programs (java,
mvn): a shell script under the program's name, so the code under test runs it for real."""

from __future__ import annotations

import stat
from pathlib import Path


def fake_exe(directory: Path, name: str, script: str) -> Path:
    """``directory/name``, an executable shell script running ``script``."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe
