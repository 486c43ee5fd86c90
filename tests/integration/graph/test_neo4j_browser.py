"""`trajgraph neo4j start --browser` in a real headless Chromium: Neo4j Browser loads from the
local server, connects with the password, plays the trajgraph guide, runs the library's
`why_chain` for the demo turn and draws the chain as a graph. The screenshot is left in
tests/artifacts/neo4j-browser-why-chain.png.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages ending in NUL on fds 3 and 4), so no driver package is needed; its flags and
environment are the why-picture test's. Needs /usr/bin/chromium; skipped without it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.queries.test_why_picture import (
    CHROMIUM,
    FLAGS,
    chromium_env,
    png_pixels,
)
from tests.integration.servers import Private, free_port, private_neo4j_server
from tests.paths import ARTIFACTS
from trajgraph.core.settings import Settings
from trajgraph.demo import DEMO_ID, WHY_TURN, write_sample
from trajgraph.graph.local_server.browser import GUIDE, write_guide
from trajgraph.queries import library
from trajgraph.queries.library.browser_guide import WHY_CHAIN_GRAPH, guide_html

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} not found: install Debian's `chromium` package to run this test",
)
WINDOW = (1400, 1000)
WAIT_S = 60.0


class DevTools:
    """A headless Chromium and one page of it, over the DevTools protocol on a pipe."""

    def __init__(self, tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds_3_and_4() -> None:  # in the child, before exec
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                str(CHROMIUM),
                *FLAGS,
                f"--user-data-dir={tmp / 'profile'}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=chromium_env(tmp),
            cwd=tmp,
            # Not close_fds: what the child keeps is what is inheritable, i.e. fds 3 and 4
            # (os.dup2 makes them so; every other fd of Python's is not, PEP 446).
            close_fds=False,
            preexec_fn=fds_3_and_4,
            start_new_session=True,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.session = ""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WINDOW[0],
            height=WINDOW[1],
            deviceScaleFactor=1,
            mobile=False,
        )

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + WAIT_S
        while True:
            while b"\0" not in self._buf:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([self._from_chrome], [], [], max(0.0, left))
                assert ready, f"chromium did not answer {method} in {WAIT_S:g} s"
                chunk = os.read(self._from_chrome, 1 << 20)
                assert chunk, "chromium closed its DevTools pipe"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, (method, reply["error"])
                return dict(reply.get("result") or {})

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        deadline = time.monotonic() + WAIT_S
        while not (value := self.js(expression)):
            if time.monotonic() > deadline:
                self.screenshot(ARTIFACTS / "neo4j-browser-timeout.png")
                pytest.fail(f"Neo4j Browser: no {what} within {WAIT_S:g} s")
            time.sleep(0.25)
        return value

    def type_into(self, selector: str, text: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


@pytest.fixture
def browser_server(neo4j_settings: Settings, tmp_path: Path) -> Iterator[Private]:
    base = dataclasses.replace(
        neo4j_settings,
        local=dataclasses.replace(neo4j_settings.local, browser=True, http_port=free_port()),
    )
    with private_neo4j_server(base, tmp_path) as private:
        # As `trajgraph neo4j start --browser` does: the guide comes from the read side.
        write_guide(private.settings.local, guide_html())
        yield private


def _run_in_editor(page: DevTools, text: str, frames_before: int) -> None:
    """Type ``text`` into the Browser's editor and run it; wait for its frame."""
    page.type_into('[data-testid="activeEditor"] textarea', text)
    page.js("document.querySelector('[data-testid=\"editor-Run\"]').click()")
    page.wait_for(
        f"document.querySelectorAll('[data-testid=\"frame\"]').length > {frames_before}",
        f"frame for {text[:40]!r}",
    )


def _frames(page: DevTools) -> int:
    return int(page.js("document.querySelectorAll('[data-testid=\"frame\"]').length"))


def test_browser_connects_runs_why_chain_and_draws_the_graph(
    browser_server: Private, tmp_path: Path
) -> None:
    local = browser_server.settings.local
    neo = browser_server.settings.neo4j
    http = f"http://127.0.0.1:{local.http_port}"
    # The server side: HTTP on the loopback only, auth on, the guide served.
    guide = urllib.request.urlopen(f"{http}/browser/{GUIDE}", timeout=10).read().decode()
    assert all(f"<h3>{name}</h3>" in guide for name in library.names())
    request = urllib.request.Request(
        f"{http}/db/{neo.database}/tx/commit",
        data=b'{"statements": []}',
        headers={"content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    conf = (local.run_dir / "conf" / "neo4j.conf").read_text()  # type: ignore[operator]
    assert f"server.http.listen_address=127.0.0.1:{local.http_port}" in conf
    assert "dbms.security.auth_enabled=true" in conf

    (tmp_path / "sample").mkdir()
    sample = write_sample(tmp_path / "sample")
    flags = ["--tenant", "default", "--extractor", "heuristic", "--embedder", "none"]
    ingest = subprocess.run(
        [sys.executable, "-m", "trajgraph", "ingest", str(sample), *flags],
        env=browser_server.env(),
        capture_output=True,
        timeout=300,
    )
    assert ingest.returncode == 0, ingest.stderr[-2000:]

    page = DevTools(tmp_path / "chromium")
    try:
        dbms = f"neo4j://{neo.user}@127.0.0.1:{local.bolt_port}"
        page.call("Page.navigate", url=f"{http}/browser/?dbms={dbms}&db={neo.database}")
        page.wait_for("!!document.querySelector('[data-testid=\"password\"]')", "login form")
        page.type_into('[data-testid="password"]', str(neo.password))
        page.js("document.querySelector('[data-testid=\"connect\"]').click()")
        # Connected: the server's post-connect command plays the trajgraph guide.
        page.wait_for(
            "document.body.innerText.includes('trajgraph: the Cypher library')", "trajgraph guide"
        )
        params = (
            f":param {{tenant: 'default', trajectory: '{DEMO_ID}', turn: {WHY_TURN}, "
            "state: null, depth: 4}"
        )
        _run_in_editor(page, params, _frames(page))
        _run_in_editor(page, library.load("why_chain").text, _frames(page))
        # why_chain's rows: the demo turn's chain, with the failing test in it.
        page.wait_for(
            "document.querySelector('[data-testid=\"frame\"]').innerText.includes('leads_to')",
            "why_chain result table",
        )
        rows_text = page.js("document.querySelector('[data-testid=\"frame\"]').innerText")
        assert "action" in rows_text and "state" in rows_text, rows_text[:2000]
        _run_in_editor(page, WHY_CHAIN_GRAPH, _frames(page))
        nodes = page.wait_for(
            "document.querySelector('[data-testid=\"frame\"]')"
            ".querySelectorAll('svg g.node').length",
            "graph drawing",
        )
        # The drawing holds the nodes of why_chain's rows, as trajgraph itself reads them.
        rows = library.run(
            browser_server.driver,
            "why_chain",
            {
                "tenant": "default",
                "trajectory": DEMO_ID,
                "turn": WHY_TURN,
                "state": None,
                "depth": 4,
            },
            database=neo.database,
        )
        assert len(rows) >= 2 and nodes == len({r["uid"] for r in rows})
        time.sleep(2.0)  # the force layout settles
        png = page.screenshot(ARTIFACTS / "neo4j-browser-why-chain.png")
    finally:
        page.close()
    width, height, pixels = png_pixels(png)
    assert (width, height) == WINDOW
    assert len(set(pixels[:: max(1, len(pixels) // 5000)])) > 20  # not a blank page
