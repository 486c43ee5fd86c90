"""queries.why_render: Mermaid, DOT and HTML pictures of synthetic why-chains, hostile text."""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Any

import pytest

from trajgraph.queries.why.render import (
    BOX_W,
    DETAIL_CHARS,
    IDENT_LINES,
    TEXT_LINES,
    WRAP,
    _clean,
    _width,
    _wrap,
    render_dot,
    render_html,
    render_mermaid,
)

SCRIPT = "<script>alert(1)</script>"
# The first 60 characters (what Mermaid and DOT labels keep) hold the worst of it.
HOSTILE = (
    f'"] --> %%{{init:{{}}}}%% #quot; `b` {SCRIPT} "quoted" \'single\' end; '
    "a\\nb \\\\ {curly} (paren) |pipe| & &amp; &lt; \x1b[31m red\x00 \u202eevil\u202c "
    "https://evil.example/x.js http://x.example\nsecond line\r\n\tthird"
)
HOSTILE_HEAD = f'"] --> %%{{init:{{}}}}%% #quot; `b` {SCRIPT}'
UNICODE = "naïve café 日本語のテキスト 🚀 Ωmega"


def row(
    uid: str,
    kind: str,
    turn: int,
    text: str,
    hops: int,
    leads_to: list[str] | None = None,
    identifiers: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "uid": uid,
        "kind": kind,
        "turn": turn,
        "text": text,
        "hops": hops,
        "leads_to": leads_to or [],
        "identifiers": identifiers or [],
    }


def chain() -> list[dict[str, Any]]:
    """turn 1 action -> 2 states -> turn 3 action -> state -> turn 5 action (target) -> state;
    one edge skips turn 3; hostile text, URLs, unicode and a 100 kB observation."""
    return [
        row(
            "tu_1", "action", 1, "python -m pytest -q", 3, ["st_1a", "st_1b"], ["python -m pytest"]
        ),
        row("st_1a", "state", 1, HOSTILE, 2, ["tu_3", "tu_5"], [SCRIPT, '"]', "`x`"]),
        row("st_1b", "state", 1, UNICODE, 2, ["tu_3"], ["日本語", "src/calc.py"]),
        row("tu_3", "action", 3, "sed -i 's|a|b|' src/calc.py --> ok", 1, ["st_3"], ["sed"]),
        row("st_3", "state", 3, "x" * 100_000, 1, ["tu_5"], [f"id{i}" for i in range(40)]),
        row("tu_5", "action", 5, 'echo "done" ]] `rm -rf /`', 0, ["st_5"], ["echo"]),
        row("st_5", "state", 5, "exit code: 0\n\n(turn 5)", 0, [], ["https://example.org/a"]),
    ]


EXPECTED_EDGES = 8  # 2 + 2 + 1 + 1 + 1 + 1


def html_of(rows: list[dict[str, Any]] | None = None, depth: int = 3) -> str:
    return render_html(
        chain() if rows is None else rows, trajectory="traj-1", target="turn 5", depth=depth
    )


def svg_of(page: str) -> ET.Element:
    """The inline SVG must be well-formed XML on its own (entities and all)."""
    start = page.index('<svg class="why"')
    end = page.rindex("</svg>") + len("</svg>")
    return ET.fromstring(page[start:end])


def classes(el: ET.Element) -> set[str]:
    return set((el.get("class") or "").split())


def svg_nodes(svg: ET.Element) -> list[ET.Element]:
    return [el for el in svg.iter("g") if "node" in classes(el)]


def svg_edges(svg: ET.Element) -> list[ET.Element]:
    return [el for el in svg.iter("path") if "edge" in classes(el)]


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.meta: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs
        d = dict(attrs)
        if tag == "meta" and d.get("name"):
            self.meta[str(d["name"])] = str(d.get("content"))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


# --- HTML ----------------------------------------------------------------------------------------


def test_html_counts_nodes_edges_and_meta() -> None:
    page = html_of()
    svg = svg_of(page)
    nodes, edges = svg_nodes(svg), svg_edges(svg)
    assert len(nodes) == 7
    assert len(edges) == EXPECTED_EDGES
    assert page.count('class="node') == 7  # what a grep-level test would count
    assert page.count('class="edge"') == EXPECTED_EDGES
    meta = parse(page).meta
    assert meta["trajgraph-nodes"] == "7"
    assert meta["trajgraph-edges"] == str(EXPECTED_EDGES)
    assert meta["trajgraph-target"] == "turn 5"
    assert sorted(n.get("data-turn") or "" for n in nodes) == ["1", "1", "1", "3", "3", "5", "5"]
    targets = [n for n in nodes if "target" in classes(n)]
    assert {n.get("data-uid") for n in targets} == {"tu_5", "st_5"}
    assert all(n.get("data-turn") == "5" for n in targets)
    ids = {n.get("data-uid"): n.get("id") for n in nodes}
    wanted = {(r["uid"], d) for r in chain() for d in r["leads_to"]}
    assert {(e.get("data-from"), e.get("data-to")) for e in edges} == wanted
    assert all(re.fullmatch(r"n_[A-Za-z0-9_]+", i or "") for i in ids.values())
    assert all(e.get("marker-end") == "url(#arrow)" for e in edges)


def test_html_has_title_legend_and_one_svg() -> None:
    page = html_of()
    p = parse(page)
    assert page.startswith("<!DOCTYPE html>")
    assert p.tags.count("svg") == 1 + 7  # the picture, plus one clipping viewport per box
    assert p.tags.count("style") == 1
    assert "<title>why turn 5 of traj-1</title>" in page
    assert '<ul class="legend">' in page
    text = "".join(p.text)
    assert "action: the command a turn ran" in text
    assert "CAUSES" in text
    assert "depth 3" in text


def test_html_escapes_hostile_text() -> None:
    page = html_of()
    p = parse(page)
    assert "<script" not in page.lower()
    assert "script" not in p.tags
    assert set(p.tags) <= {
        "html", "head", "meta", "title", "style", "body", "h1", "p", "ul", "li", "span", "div",
        "svg", "defs", "marker", "path", "g", "rect", "text", "tspan", "table", "thead", "tbody",
        "tr", "th", "td",
    }  # fmt: skip
    assert not [a for a, _ in p.attrs if a.startswith("on")]  # no event handlers
    text = "".join(p.text)
    # The hostile text shows as text (flattened, controls and bidi overrides removed).
    assert SCRIPT in text
    assert HOSTILE_HEAD + " \"quoted\" 'single' end; a\\nb" in text
    assert "second line third" in text
    assert "\x1b" not in page and "\x00" not in page and "\u202e" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_html_loads_nothing_and_names_no_url() -> None:
    page = html_of()
    assert "http://" not in page and "https://" not in page and "://" not in page
    # ...yet a browser still shows the URLs of the log as text:
    assert "https://evil.example/x.js" in "".join(parse(page).text)
    p = parse(page)
    assert not [a for a, _ in p.attrs if a in ("src", "href", "xlink:href", "srcset", "action")]
    assert "@import" not in page
    assert re.findall(r"url\(([^)]*)\)", page) == ["#arrow"] * EXPECTED_EDGES
    csp = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert len(csp) == 1 and "default-src 'none'" in csp[0] and "script-src" not in csp[0]


def test_html_is_deterministic_and_ignores_row_order() -> None:
    first = html_of()
    assert html_of() == first
    rows = chain()
    for seed in range(5):
        random.Random(seed).shuffle(rows)
        for r in rows:
            random.Random(seed).shuffle(r["leads_to"])
        assert html_of(rows) == first


def test_same_picture_whatever_the_uids_and_identifier_order() -> None:
    """uids hash the tenant and the query collects identifiers in no order: neither may move
    anything but the uids themselves."""
    rows = chain()
    renamed = {r["uid"]: f"zz_{i}" for i, r in enumerate(reversed(rows))}
    other = [
        {
            **r,
            "uid": renamed[r["uid"]],
            "leads_to": [renamed[u] for u in r["leads_to"]],
            "identifiers": list(reversed(r["identifiers"])),
        }
        for r in rows
    ]

    def strip(page: str) -> str:
        return re.sub(r'(id|data-uid|data-from|data-to)="[^"]*"', "", page)

    assert strip(html_of(other)) == strip(html_of(rows))


def test_html_very_long_text_is_truncated_and_page_stays_small() -> None:
    page = html_of()
    assert len(page.encode("utf-8")) < 60_000
    svg = svg_of(page)
    box = next(n for n in svg_nodes(svg) if n.get("data-uid") == "st_3")
    body = [t.text or "" for t in box.iter("text") if "body" in classes(t)]
    ids = [t.text or "" for t in box.iter("text") if "ids" in classes(t)]
    assert len(body) == TEXT_LINES and body[-1].endswith("…")
    assert len(ids) == IDENT_LINES and ids[-1].endswith("…")
    assert all(_width(line) <= WRAP for line in body + ids)
    assert "x" * (DETAIL_CHARS + 1) not in page


def test_html_unicode_survives() -> None:
    page = html_of()
    assert UNICODE in "".join(parse(page).text)
    page.encode("utf-8")  # strict: no lone surrogate reaches the page
    rows = [row("s", "state", 0, "bad \ud800 surrogate", 0, [], ["\udfff"])]
    html_of(rows).encode("utf-8")
    render_mermaid(rows, trajectory="t", target="turn 0").encode("utf-8")
    render_dot(rows, trajectory="t", target="turn 0").encode("utf-8")


def _boxes(svg: ET.Element) -> dict[str, tuple[int, int, int, int]]:
    out = {}
    for n in svg_nodes(svg):
        m = re.fullmatch(r"translate\((\d+),(\d+)\)", n.get("transform") or "")
        assert m, n.get("transform")
        rect = next(r for r in n.iter("rect") if "box" in classes(r))
        out[n.get("data-uid") or ""] = (
            int(m[1]),
            int(m[2]),
            int(rect.get("width") or 0),
            int(rect.get("height") or 0),
        )
    return out


def test_html_layout_time_flows_left_to_right_without_overlap() -> None:
    svg = svg_of(html_of())
    boxes = _boxes(svg)
    x = {u: b[0] for u, b in boxes.items()}
    assert x["tu_1"] < x["st_1a"] == x["st_1b"] < x["tu_3"] < x["st_3"] < x["tu_5"] < x["st_5"]
    assert all(b[2] == BOX_W for b in boxes.values())
    items = list(boxes.values())
    for i, (ax, ay, aw, ah) in enumerate(items):
        for bx, by, bw, bh in items[i + 1 :]:
            assert ax + aw <= bx or bx + bw <= ax or ay + ah <= by or by + bh <= ay
    width, height = int(svg.get("width") or 0), int(svg.get("height") or 0)
    assert svg.get("viewBox") == f"0 0 {width} {height}"
    for bx, by, bw, bh in items:
        assert 0 <= bx <= width - bw and 0 <= by <= height - bh
    bands = [g for g in svg.iter("g") if "band" in classes(g)]
    assert [b.get("data-turn") for b in bands] == ["1", "3", "5"]


def test_html_edges_never_cross_a_box() -> None:
    """Forward edges bend in the gaps: sample the straight parts of each path and check no
    point falls inside a box other than its ends."""
    svg = svg_of(html_of())
    boxes = _boxes(svg)
    for e in svg_edges(svg):
        d = e.get("d") or ""
        ends = {e.get("data-from"), e.get("data-to")}
        for seg in re.findall(r"L(\d+),(\d+)", d):
            px, py = int(seg[0]), int(seg[1])
            for uid, (bx, by, bw, bh) in boxes.items():
                if uid not in ends:
                    assert not (bx < px - 1 < bx + bw and by < py < by + bh), (uid, d)


def test_html_edges_skip_rows_outside_the_chain_self_loops_and_duplicates() -> None:
    rows = [
        row("a", "action", 0, "a", 1, ["a", "b", "gone", "b"]),
        row("b", "state", 0, "b", 0, []),
        row("b", "state", 0, "duplicate uid", 0, ["a"]),
    ]
    svg = svg_of(html_of(rows))
    assert len(svg_nodes(svg)) == 2
    assert [(e.get("data-from"), e.get("data-to")) for e in svg_edges(svg)] == [("a", "b")]


def test_html_empty_chain() -> None:
    page = render_html([], trajectory="t<x>", target="turn 9", depth=2)
    assert "no such turn or state in the graph" in page
    assert parse(page).meta["trajgraph-nodes"] == "0"
    assert "<svg" not in page
    assert "t&lt;x&gt;" in page


def test_hostile_uid_trajectory_and_target_are_escaped() -> None:
    uid = '"><script>alert(1)</script>'
    rows = [row(uid, "action", 2, "x", 0, [])]
    page = render_html(rows, trajectory='"<b>', target="turn `2`", depth=1)
    assert "<script" not in page and "<b>" not in page
    node = svg_nodes(svg_of(page))[0]
    assert node.get("data-uid") == uid
    assert re.fullmatch(r"n_[A-Za-z0-9_]+", node.get("id") or "")
    mer = render_mermaid(rows, trajectory='"<b>', target="turn `2`").splitlines()
    assert json.loads(mer[1].removeprefix("title: ")) == 'why turn `2` of "<b>'
    assert [m[1] for m in map(MERMAID_NODE.match, mer) if m] == [node.get("id")]
    dot = render_dot(rows, trajectory='"<b>', target="turn `2`").splitlines()
    assert dot[1].endswith(r'label="why turn `2` of \"<b>"];')
    assert [m[1] for m in map(DOT_NODE.match, dot) if m] == [node.get("id")]


# --- Mermaid -------------------------------------------------------------------------------------

MERMAID_NODE = re.compile(r'^  (n_[A-Za-z0-9_]+)\["([^"]*)"\]:::(action|state)$')
MERMAID_EDGE = re.compile(r"^  (n_[A-Za-z0-9_]+) --> (n_[A-Za-z0-9_]+)$")


def test_mermaid_structure_and_escaping() -> None:
    text = render_mermaid(chain(), trajectory="traj-1", target="turn 5")
    lines = text.splitlines()
    assert lines[0] == "---" and lines[2] == "---" and lines[3] == "flowchart LR"
    assert json.loads(lines[1].removeprefix("title: ")) == "why turn 5 of traj-1"
    nodes = [m for m in map(MERMAID_NODE.match, lines) if m]
    edges = [m for m in map(MERMAID_EDGE.match, lines) if m]
    assert len(nodes) == 7
    assert len(edges) == EXPECTED_EDGES
    ids = {m[1] for m in nodes}
    assert len(ids) == 7
    assert all(m[1] in ids and m[2] in ids for m in edges)
    styled = [ln for ln in lines if ln.startswith("  style ")]
    assert len(styled) == 2 and all("stroke-width:3px" in ln for ln in styled)
    # Every line is a header, a classDef, a node, an edge or a style: hostile text added none.
    other = [
        ln
        for ln in lines[4:]
        if not (MERMAID_NODE.match(ln) or MERMAID_EDGE.match(ln))
        and not ln.startswith(("  classDef ", "  style "))
    ]
    assert other == []
    for m in nodes:
        label = re.sub(r"#\d+;", "", m[2].replace("<br/>", "\n"))
        assert not set(label) & set('"[]<>`{}|()%;\\#'), label
    hostile = next(m[2] for m in nodes if m[1] == "n_st_1a").split("<br/>")
    assert hostile[0] == "turn 1 · state"
    assert hostile[1].startswith(
        "#34;#93; --#62; #37;#37;#123;init:#123;#125;#125;#37;#37; #35;quot#59; #96;b#96; "
        "#60;script#62;alert#40;1#41;#60;/script#62;"
    )  # a literal `#quot;` stays literal: its `#` is coded
    assert hostile[2] == "ids: #34;#93;, #60;script#62;alert#40;1#41;#60;/script#62;, #96;x#96;"

    def decode(label: str) -> str:
        return re.sub(r"#(\d+);", lambda m: chr(int(m[1])), label)

    assert decode(hostile[1]).startswith(HOSTILE_HEAD)


def test_mermaid_deterministic_and_truncated() -> None:
    a = render_mermaid(chain(), trajectory="traj-1", target="turn 5")
    rows = chain()
    random.Random(1).shuffle(rows)
    assert render_mermaid(rows, trajectory="traj-1", target="turn 5") == a
    assert max(len(ln) for ln in a.splitlines()) < 400
    assert render_mermaid([], trajectory="t", target="turn 1").count("empty[") == 1


# --- DOT -----------------------------------------------------------------------------------------

DOT_STR = r'"((?:[^"\\]|\\.)*)"'
DOT_NODE = re.compile(
    rf'^  (n_[A-Za-z0-9_]+) \[label={DOT_STR}, fillcolor="#[0-9a-f]{{6}}", color="#[0-9a-f]{{6}}"'
    r"(, penwidth=3)?\];$"
)
DOT_EDGE = re.compile(r"^  (n_[A-Za-z0-9_]+) -> (n_[A-Za-z0-9_]+);$")


def dot_unescape(s: str) -> list[str]:
    """DOT label -> its lines: `\\n` breaks, `\\x` is x, then HTML entities (Graphviz does)."""
    lines, cur, i = [], "", 0
    while i < len(s):
        if s[i] == "\\":
            nxt = s[i + 1]
            if nxt == "n":
                lines.append(cur)
                cur = ""
            else:
                cur += nxt
            i += 2
        else:
            cur += s[i]
            i += 1
    lines.append(cur)
    return [ln.replace("&amp;", "&") for ln in lines]


def test_dot_structure_and_escaping() -> None:
    text = render_dot(chain(), trajectory="traj-1", target="turn 5")
    lines = text.splitlines()
    assert lines[0] == "digraph why {" and lines[-1] == "}"
    assert text.count("{") == text.count("}")  # hostile braces are all inside quoted strings
    nodes = [m for m in map(DOT_NODE.match, lines) if m]
    edges = [m for m in map(DOT_EDGE.match, lines) if m]
    assert len(nodes) == 7
    assert len(edges) == EXPECTED_EDGES
    assert sum(1 for m in nodes if m[3]) == 2  # targets
    assert len(lines) == 4 + 7 + EXPECTED_EDGES + 1  # nothing else slipped in
    by_id = {m[1]: dot_unescape(m[2]) for m in nodes}
    hostile = by_id["n_st_1a"]
    assert hostile[0] == "turn 1 · state"
    assert hostile[1].startswith(HOSTILE_HEAD)
    assert hostile[1].endswith("…") and len(hostile[1]) <= 60
    assert hostile[2] == f'ids: "], {SCRIPT}, `x`'
    assert all(len(v[1]) <= 60 for v in by_id.values())


def test_dot_backslashes_cannot_escape_the_string() -> None:
    rows = [row("a", "action", 0, "ends with backslash \\", 0, [], ['x\\"y'])]
    text = render_dot(rows, trajectory="t", target="turn 0")
    m = next(m for m in map(DOT_NODE.match, text.splitlines()) if m)
    assert dot_unescape(m[2]) == ["turn 0 · action", "ends with backslash \\", 'ids: x\\"y']


def test_dot_keeps_literal_entities_literal() -> None:
    rows = [row("a", "action", 0, "a &amp; b &lt;c&gt; \\n", 0)]
    text = render_dot(rows, trajectory="t", target="turn 0")
    assert "a &amp;amp; b &amp;lt;c&amp;gt; \\\\n" in text
    m = next(m for m in map(DOT_NODE.match, text.splitlines()) if m)
    assert dot_unescape(m[2])[1] == "a &amp; b &lt;c&gt; \\n"


# --- helpers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("a\n\tb\r\nc", 10, "a b c"),
        ("x" * 20, 10, "x" * 9 + "…"),
        ("\x00\x1b\u202e ok", 10, "ok"),
        (None, 5, ""),
        (" " * 10_000 + "tail", 50, "…"),  # the work is bounded; a cut is marked
    ],
)
def test_clean(text: Any, limit: int, expected: str) -> None:
    assert _clean(text, limit) == expected


def test_wrap_respects_display_width() -> None:
    lines = _wrap("日本語" * 20, 10, 3)
    assert len(lines) == 3 and lines[-1].endswith("…")
    assert all(_width(ln) <= 10 for ln in lines)
    assert _wrap("short words only", 40, 3) == ["short words only"]
    assert _wrap("a " + "b" * 25, 10, 5) == ["a", "b" * 10, "b" * 10, "b" * 5]
