"""What the CLI's logging shows a user: problems, not normal operation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_starting_prism_is_not_a_warning_but_beams_other_warnings_stay() -> None:
    # Every `--runner PrismRunner` run printed "WARNING ... Really starting service at
    # localhost:PORT with cmd: (...)": Beam's note that it started the job server.
    script = """
import logging
from trajgraph import cli
cli._configure_logging()
log = logging.getLogger("apache_beam.utils.subprocess_server")
log.warning("Really starting service at localhost:1234 with cmd: ('prism',)")
log.warning("Starting service with ('prism',)")
log.warning("the job server exited with code 1")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if "subprocess_server" in x]
    assert lines == [
        "WARNING apache_beam.utils.subprocess_server: the job server exited with code 1"
    ]
