"""The HTML why-picture of the demo trajectory, from the real graph, in headless Chromium.

Needs /usr/bin/chromium (Debian's `chromium` package); skipped with a message without it.
Leaves the page and its screenshot in tests/artifacts/ for people to look at.
"""

from __future__ import annotations

import os
import re
import signal
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import NO_MODELS, Ingest
from tests.paths import ARTIFACTS
from trajgraph.demo import DEMO_ID, WHY_TURN, write_sample
from trajgraph.queries.why.chain import why_chain
from trajgraph.queries.why.render import render_html

CHROMIUM = Path("/usr/bin/chromium")
DEPTH = 6
WINDOW = (1400, 900)
TIMEOUT = 90  # seconds per Chromium run; a healthy run takes about one
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The picture's fills and the target's outline (see the CSS in queries/why_render.py).
ACTION_FILL = (0xDB, 0xEA, 0xFE)
STATE_FILL = (0xDC, 0xFC, 0xE7)
TARGET_STROKE = (0xDC, 0x26, 0x26)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} not found: install Debian's `chromium` package to run this test",
)


def chromium_env(tmp: Path) -> dict[str, str]:
    """Chromium's environment: HOME and XDG folders under ``tmp``, nothing of the user's."""
    return {
        **os.environ,
        "HOME": str(tmp),
        "XDG_CONFIG_HOME": str(tmp / "xdg-config"),
        "XDG_CACHE_HOME": str(tmp / "xdg-cache"),
    }


def chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run with a fresh profile and HOME under `tmp`. On timeout its
    whole process group (it was started in a new session) is killed, then the test fails."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    profile.mkdir()
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=chromium_env(tmp),
        cwd=tmp,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish in {TIMEOUT}s: {cmd}\n{err[-2000:]}")
    if proc.returncode != 0:
        pytest.fail(f"chromium exited {proc.returncode}: {cmd}\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and RGB pixels of an 8-bit RGB/RGBA, non-interlaced PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    assert header is not None, "no IHDR"
    width, height, depth, ctype, _, _, interlace = header
    assert depth == 8 and ctype in (2, 6) and interlace == 0, header
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for y in range(height):
        start = y * (stride + 1)
        kind_byte, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind_byte == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind_byte == 2:  # Up
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif kind_byte == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + (left + prev[i]) // 2) & 255
        elif kind_byte == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        else:
            assert kind_byte == 0, f"bad PNG filter {kind_byte}"
        pixels += zip(line[0::bpp], line[1::bpp], line[2::bpp], strict=True)
        prev = line
    return width, height, pixels


def near(pixel: tuple[int, int, int], colour: tuple[int, int, int], tol: int = 8) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(pixel, colour, strict=True))


@pytest.fixture
def demo_chain(
    driver: Any, neo4j_settings: Any, ingested: Ingest, tenant: str, tmp_path: Path
) -> list[dict]:
    assert ingested(write_sample(tmp_path), tenant=tenant, args=NO_MODELS).summary.ingested == 1
    chain = why_chain(
        driver,
        database=neo4j_settings.neo4j.database,
        tenant=tenant,
        trajectory=DEMO_ID,
        turn=WHY_TURN,
        depth=DEPTH,
    )
    assert chain, "the demo's why-chain is empty"
    return chain


def test_why_picture_renders_in_headless_chromium(demo_chain: list[dict], tmp_path: Path) -> None:
    target = f"turn {WHY_TURN}"
    page = render_html(demo_chain, trajectory=DEMO_ID, target=target, depth=DEPTH)
    assert "://" not in page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    html_path = ARTIFACTS / f"why-{DEMO_ID}.html"
    html_path.write_text(page, encoding="utf-8")
    url = html_path.resolve().as_uri()
    n_nodes = len({row["uid"] for row in demo_chain})
    chain_uids = {row["uid"] for row in demo_chain}
    n_edges = len({(r["uid"], d) for r in demo_chain for d in r["leads_to"] if d in chain_uids})
    targets = {row["uid"] for row in demo_chain if row["hops"] == 0}

    # What the browser built from the page.
    dom = chromium(["--dump-dom", url], tmp_path).stdout
    assert "<svg" in dom, dom[:2000]
    g_classes = [set(c.split()) for c in re.findall(r'<g\b[^>]*?\bclass="([^"]*)"', dom)]
    nodes = [c for c in g_classes if "node" in c]
    assert len(nodes) == n_nodes
    assert sum(1 for c in nodes if "target" in c) == len(targets) >= 1
    assert len(re.findall(r'<path\b[^>]*?\bclass="edge"', dom)) == n_edges
    assert f'<meta name="trajgraph-nodes" content="{n_nodes}">' in dom
    node_tags = re.findall(r'<g\b[^>]*?\bclass="node[^"]*"[^>]*>', dom)
    turns = [re.search(r'data-turn="(-?\d+)"', t) for t in node_tags]
    assert sorted(int(m[1]) for m in turns if m) == sorted(row["turn"] for row in demo_chain)
    assert all(f'data-turn="{WHY_TURN}"' in t for t in node_tags if "target" in t)
    assert 3 in {row["turn"] for row in demo_chain}  # the fix is in the picture
    assert f"why {target} of {DEMO_ID}" in dom
    assert "<script" not in dom

    # What it looks like.
    png_path = ARTIFACTS / f"why-{DEMO_ID}.png"
    png_path.unlink(missing_ok=True)
    chromium([f"--screenshot={png_path}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url], tmp_path)
    assert png_path.is_file(), f"no screenshot at {png_path}"
    data = png_path.read_bytes()
    assert len(data) > 20_000, f"screenshot is only {len(data)} bytes"
    width, height, pixels = png_pixels(data)
    assert (width, height) == WINDOW
    colours = Counter(pixels)

    def count(colour: tuple[int, int, int], tol: int = 8) -> int:
        return sum(n for c, n in colours.items() if near(c, colour, tol))

    assert len(colours) > 100, "screenshot has almost no distinct colours"
    not_white = len(pixels) - count((255, 255, 255), 6)
    assert not_white > 0.05 * len(pixels), f"screenshot is nearly blank ({not_white} px)"
    # The boxes are on screen, in their colours, and the target is outlined.
    assert count(ACTION_FILL) > 2_000
    assert count(STATE_FILL) > 2_000
    assert count(TARGET_STROKE, 24) > 300
