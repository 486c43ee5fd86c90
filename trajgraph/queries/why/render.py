"""Pictures of a why-chain (rows from `queries.why.why_chain`): Mermaid, Graphviz DOT, and one
self-contained HTML page whose SVG is laid out here. Pure functions: rows in, text out.

Log text is untrusted. Every renderer first flattens it to one line, replaces control and
bidi-override characters (and lone surrogates), truncates it, then escapes it for its target
syntax: Mermaid entity codes, DOT string escapes, HTML entities. The HTML page loads nothing:
no script, no external URL (its Content-Security-Policy forbids both), only inline CSS and SVG.

A node is the *target* when its `hops` is 0 (the turn asked about and the states it produced,
or the state asked about). Edges are the rows' `leads_to` (CAUSES) restricted to the chain,
without self-loops. Output does not depend on the order of the input rows.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LABEL_CHARS = 60  # text in a Mermaid / DOT label
DETAIL_CHARS = 400  # text kept for the HTML boxes, tooltips and the table
IDENT_CHARS = 80  # one identifier
LABEL_IDENTS = 5  # identifiers named in a Mermaid / DOT label
KIND_RANK = {"action": 0, "state": 1}
EMPTY = "no such turn or state in the graph"

# HTML layout, in pixels (integers only, so the output is byte-for-byte deterministic).
BOX_W = 250
PAD = 10
CHAR_W = 7.3  # advance of a 12px monospace glyph (DejaVu Sans Mono: 0.602em), rounded up
WRAP = int((BOX_W - 2 * PAD) / CHAR_W)  # characters per line inside a box
TEXT_LINES = 4
IDENT_LINES = 2
HEAD_H = 18
LINE_H = 15
IDENT_H = 14
COL_GAP = 56
ROW_GAP = 18
MARGIN = 20
BAND_PAD = 14
TOP = MARGIN + 34  # room for the turn labels above the boxes

_BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


@dataclass(frozen=True)
class _Node:
    uid: str
    sid: str  # sanitized id: [A-Za-z0-9_], starts with a letter, unique in the chain
    kind: str  # 'action' or 'state'
    turn: int | None
    hops: int | None
    text: str  # cleaned, one line, at most DETAIL_CHARS
    identifiers: tuple[str, ...]  # cleaned

    @property
    def target(self) -> bool:
        return self.hops == 0

    @property
    def turn_label(self) -> str:
        return "turn ?" if self.turn is None else f"turn {self.turn}"


# --- text cleaning -----------------------------------------------------------------------------


def _clean(value: Any, limit: int) -> str:
    """One line of printable text, at most `limit` characters (an ellipsis marks a cut)."""
    raw = "" if value is None else str(value)
    bound = limit * 4 + 64  # bound the work on a megabyte of log
    cut = len(raw) > bound
    chars = []
    for ch in raw[:bound]:
        cat = unicodedata.category(ch)
        if cat == "Cs":
            chars.append("\ufffd")
        elif cat == "Cc" or ord(ch) in _BIDI:
            chars.append(" ")
        else:
            chars.append(ch)
    flat = " ".join("".join(chars).split())
    if len(flat) > limit or (cut and len(flat) >= limit):
        return flat[: limit - 1].rstrip() + "…"
    return flat + "…" if cut else flat


def _width(text: str) -> int:
    """Display width in monospace cells: wide East Asian glyphs take two, combining marks none."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


def _split_at(text: str, width: int) -> tuple[str, str]:
    used = 0
    for i, ch in enumerate(text):
        used += _width(ch)
        if used > width:
            return text[: max(i, 1)], text[max(i, 1) :]
    return text, ""


def _wrap(text: str, width: int, max_lines: int) -> list[str]:
    """Greedy word wrap by display width; long words are broken; the last kept line gets an
    ellipsis when text is left over."""
    lines: list[str] = []
    cur = ""
    for word in text.split(" "):
        if not word:
            continue
        candidate = f"{cur} {word}" if cur else word
        if _width(candidate) <= width:
            cur = candidate
            continue
        if cur:
            lines.append(cur)
        cur = word
        while _width(cur) > width:
            head, cur = _split_at(cur, width)
            lines.append(head)
    if cur:
        lines.append(cur)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and _width(last) > width - 1:
            last = last[:-1]
        lines = [*lines[: max_lines - 1], last.rstrip() + "…"]
    return lines


def _sanitize_id(uid: str, used: set[str]) -> str:
    base = "n_" + (re.sub(r"[^A-Za-z0-9_]", "_", uid)[:64] or "x")
    sid, k = base, 2
    while sid in used:
        sid, k = f"{base}_{k}", k + 1
    used.add(sid)
    return sid


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _prepare(chain: Iterable[Mapping[str, Any]]) -> tuple[list[_Node], list[tuple[str, str]]]:
    """Nodes in (turn, action before state, text, uid) order, and the CAUSES edges inside the
    chain (distinct, no self-loops, in the same order)."""
    rows: dict[str, Mapping[str, Any]] = {}
    for row in chain:
        uid = str(row.get("uid") or "")
        if uid and uid not in rows:
            rows[uid] = row

    def order(uid: str) -> tuple[int, int, int, str, str]:
        # Text before uid: uids hash the tenant, so the same trajectory draws the same picture
        # in every tenant.
        row = rows[uid]
        turn = _int_or_none(row.get("turn"))
        kind = "action" if row.get("kind") == "action" else "state"
        return (turn is None, turn or 0, KIND_RANK[kind], str(row.get("text") or ""), uid)

    used: set[str] = set()
    nodes = []
    for uid in sorted(rows, key=order):
        row = rows[uid]
        # Sorted: the query collects them in no particular order.
        idents = tuple(
            sorted({c for c in (_clean(i, IDENT_CHARS) for i in row.get("identifiers") or ()) if c})
        )
        nodes.append(
            _Node(
                uid=uid,
                sid=_sanitize_id(uid, used),
                kind="action" if row.get("kind") == "action" else "state",
                turn=_int_or_none(row.get("turn")),
                hops=_int_or_none(row.get("hops")),
                text=_clean(row.get("text"), DETAIL_CHARS),
                identifiers=idents,
            )
        )
    edges = sorted(
        {
            (uid, str(nxt))
            for uid, row in rows.items()
            for nxt in (row.get("leads_to") or ())
            if str(nxt) in rows and str(nxt) != uid
        },
        key=lambda e: (order(e[0]), order(e[1])),
    )
    return nodes, edges


def _title(trajectory: str, target: str) -> str:
    return f"why {_clean(target, 200)} of {_clean(trajectory, 200)}"


def _label_parts(node: _Node) -> list[str]:
    parts = [f"{node.turn_label} · {node.kind}", _clean(node.text, LABEL_CHARS)]
    if node.identifiers:
        shown = ", ".join(node.identifiers[:LABEL_IDENTS])
        more = len(node.identifiers) - LABEL_IDENTS
        parts.append(_clean("ids: " + shown + (f" (+{more})" if more > 0 else ""), LABEL_CHARS))
    return [p for p in parts if p]


# --- Mermaid -----------------------------------------------------------------------------------

_MERMAID_CODE = {c: f"#{ord(c)};" for c in '"#&<>[](){}|`\\;%'}


def _mermaid_text(text: str) -> str:
    """Mermaid entity codes (#34; ...) for everything that could end a quoted label, start
    markdown, a directive or HTML. `#` itself is coded first-class, so `#quot;` stays text."""
    return "".join(_MERMAID_CODE.get(c, c) for c in text)


def render_mermaid(chain: Sequence[Mapping[str, Any]], *, trajectory: str, target: str) -> str:
    nodes, edges = _prepare(chain)
    title = _title(trajectory, target)
    lines = ["---", f"title: {json.dumps(title, ensure_ascii=False)}", "---", "flowchart LR"]
    if not nodes:
        lines.append(f'  empty["{_mermaid_text(EMPTY)}"]')
        return "\n".join(lines) + "\n"
    lines += [
        "  classDef action fill:#dbeafe,stroke:#1d4ed8,color:#0f172a",
        "  classDef state fill:#dcfce7,stroke:#15803d,color:#0f172a",
    ]
    sid = {n.uid: n.sid for n in nodes}
    for node in nodes:
        label = "<br/>".join(_mermaid_text(p) for p in _label_parts(node))
        lines.append(f'  {node.sid}["{label}"]:::{node.kind}')
    for src, dst in edges:
        lines.append(f"  {sid[src]} --> {sid[dst]}")
    for node in nodes:
        if node.target:
            lines.append(f"  style {node.sid} stroke:#dc2626,stroke-width:3px")
    return "\n".join(lines) + "\n"


# --- Graphviz DOT ------------------------------------------------------------------------------


def _dot_text(text: str) -> str:
    """Inside a DOT double-quoted string: backslash and quote escaped; `&` as `&amp;` because
    Graphviz decodes HTML entities in labels. (Newlines and controls are gone already.)"""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")


def _dot_str(text: str) -> str:
    return f'"{_dot_text(text)}"'


def render_dot(chain: Sequence[Mapping[str, Any]], *, trajectory: str, target: str) -> str:
    nodes, edges = _prepare(chain)
    lines = [
        "digraph why {",
        f"  graph [rankdir=LR, labelloc=t, fontname=Helvetica, label={_dot_str(_title(trajectory, target))}];",  # noqa: E501
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
        '  edge [color="#64748b"];',
    ]
    if not nodes:
        lines.append(f"  empty [shape=plaintext, style=solid, label={_dot_str(EMPTY)}];")
    sid = {n.uid: n.sid for n in nodes}
    for node in nodes:
        label = "\\n".join(_dot_text(p) for p in _label_parts(node))
        fill, stroke = ("#dbeafe", "#1d4ed8") if node.kind == "action" else ("#dcfce7", "#15803d")
        extra = ', color="#dc2626", penwidth=3' if node.target else f', color="{stroke}"'
        lines.append(f'  {node.sid} [label="{label}", fillcolor="{fill}"{extra}];')
    for src, dst in edges:
        lines.append(f"  {sid[src]} -> {sid[dst]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- HTML + SVG --------------------------------------------------------------------------------


def _h(text: Any) -> str:
    """HTML/XML-escaped text and attribute values. `://` is written `&#58;//` so no URL appears
    in the page source (a browser still shows the log's `https://...` as it was)."""
    return html.escape(str(text), quote=True).replace("://", "&#58;//")


@dataclass
class _Box:
    node: _Node
    col: int
    x: int = 0
    y: int = 0
    h: int = 0
    text_lines: tuple[str, ...] = ()
    ident_lines: tuple[str, ...] = ()

    @property
    def cy(self) -> int:
        return self.y + self.h // 2


def _layout(
    nodes: list[_Node], edges: list[tuple[str, str]]
) -> tuple[list[_Box], list[tuple[int, int, int, int]], int, int]:
    """Columns: one per (turn, kind), in time order, so each turn has an action column and a
    state column and time flows left to right. Rows: inside a column, boxes are stacked (no
    overlap by construction), ordered by the mean height of the boxes that cause them
    (barycenter, ties by uid), and the column is centred. Returns boxes, turn bands
    (turn, x0, x1, parity), width and height."""
    col_keys = sorted({(n.turn is None, n.turn or 0, KIND_RANK[n.kind]) for n in nodes})
    col_of = {k: i for i, k in enumerate(col_keys)}
    boxes = {
        n.uid: _Box(node=n, col=col_of[(n.turn is None, n.turn or 0, KIND_RANK[n.kind])])
        for n in nodes
    }
    for box in boxes.values():
        n = box.node
        box.text_lines = tuple(_wrap(n.text, WRAP, TEXT_LINES)) or ("(no text)",)
        ids = ", ".join(n.identifiers)
        box.ident_lines = tuple(_wrap("ids: " + ids, WRAP, IDENT_LINES)) if ids else ()
        box.h = PAD + HEAD_H + LINE_H * len(box.text_lines) + PAD
        if box.ident_lines:
            box.h += 4 + IDENT_H * len(box.ident_lines)
        box.x = MARGIN + BAND_PAD + box.col * (BOX_W + COL_GAP)

    columns: list[list[_Box]] = [[] for _ in col_keys]
    for n in nodes:
        columns[boxes[n.uid].col].append(boxes[n.uid])
    heights = [sum(b.h for b in col) + ROW_GAP * (len(col) - 1) for col in columns]
    inner_h = max(heights, default=0)
    preds: dict[str, list[str]] = {}
    for src, dst in edges:
        preds.setdefault(dst, []).append(src)
    placed: set[str] = set()
    for i, col in enumerate(columns):

        def key(b: _Box) -> tuple[int, float, int, str, str]:
            ys = [boxes[p].cy for p in preds.get(b.node.uid, ()) if p in placed]
            bary = sum(ys) / len(ys) if ys else 0.0
            return (1 if ys else 0, bary, b.node.hops or 0, b.node.text, b.node.uid)

        col.sort(key=key)
        y = TOP + (inner_h - heights[i]) // 2
        for b in col:
            b.y = y
            y += b.h + ROW_GAP
        placed.update(b.node.uid for b in col)

    bands: list[tuple[int, int, int, int]] = []
    turns = sorted({(k[0], k[1]) for k in col_keys})
    for parity, tk in enumerate(turns):
        cols = [i for i, k in enumerate(col_keys) if (k[0], k[1]) == tk]
        x0 = MARGIN + cols[0] * (BOX_W + COL_GAP)
        x1 = MARGIN + cols[-1] * (BOX_W + COL_GAP) + BOX_W + 2 * BAND_PAD
        bands.append((-1 if tk[0] else tk[1], x0, x1, parity % 2))
    width = MARGIN * 2 + len(col_keys) * (BOX_W + COL_GAP) - COL_GAP + 2 * BAND_PAD
    height = TOP + inner_h + MARGIN + BAND_PAD
    ordered = [boxes[n.uid] for n in nodes]
    return ordered, bands, width, height


def _edge_paths(boxes: list[_Box], edges: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(src uid, dst uid, SVG path d) per edge. Forward edges leave a box's right side and
    enter the later box's left side; ports are spread along the side in the order of the other
    end's height, so arrows do not share a point; columns in between are crossed in a gap.
    Same-column (or backward) edges loop out to the right and come back into the right side."""
    by_uid = {b.node.uid: b for b in boxes}
    columns: dict[int, list[_Box]] = {}
    for b in sorted(boxes, key=lambda b: (b.col, b.y)):
        columns.setdefault(b.col, []).append(b)
    outs: dict[str, list[tuple[str, str]]] = {}
    ins: dict[str, list[tuple[str, str]]] = {}
    for e in edges:
        outs.setdefault(e[0], []).append(e)
        ins.setdefault(e[1], []).append(e)

    def port(box: _Box, group: list[tuple[str, str]], e: tuple[str, str], other: int) -> int:
        ordered = sorted(group, key=lambda g: (by_uid[g[other]].cy, g[other]))
        k = ordered.index(e)
        return box.y + box.h * (k + 1) // (len(ordered) + 1)

    paths = []
    for e in edges:
        s, d = by_uid[e[0]], by_uid[e[1]]
        y1 = port(s, outs[e[0]], e, 1)
        y2 = port(d, ins[e[1]], e, 0)
        x1 = s.x + BOX_W
        if d.col > s.col:
            x2 = d.x
            # Through every column in between, run horizontally in the free gap nearest to
            # the straight line, so an arrow never crosses a box it does not belong to.
            points = [(x1, y1)]
            for col in range(s.col + 1, d.col):
                stack = columns[col]
                cx = stack[0].x
                want = y1 + (y2 - y1) * (cx - x1) // max(1, x2 - x1)
                gaps = [stack[0].y - ROW_GAP // 2] + [b.y + b.h + ROW_GAP // 2 for b in stack]
                gy = min(gaps, key=lambda g: (abs(g - want), g))
                points += [(cx, gy), (cx + BOX_W, gy)]
            points.append((x2, y2))
            parts = [f"M{x1},{y1}"]
            for i in range(1, len(points)):
                (ax, ay), (bx, by) = points[i - 1], points[i]
                if i % 2 == 0:  # across a column, inside a gap
                    parts.append(f"L{bx},{by}")
                else:
                    c = max(16, (bx - ax) // 2)
                    parts.append(f"C{ax + c},{ay} {bx - c},{by} {bx},{by}")
            path = " ".join(parts)
        else:
            x2 = d.x + BOX_W
            c = 36 + 12 * abs(s.col - d.col)
            path = f"M{x1},{y1} C{x1 + c},{y1} {x2 + c},{y2} {x2},{y2}"
        paths.append((e[0], e[1], path))
    return paths


_CSS = """
:root { color-scheme: light; }
body { margin: 24px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
       color: #0f172a; background: #ffffff; }
h1 { font-size: 20px; margin: 0 0 4px; overflow-wrap: anywhere; }
p.sub { margin: 0 0 12px; color: #475569; }
ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 18px; padding: 0;
            margin: 0 0 12px; font-size: 13px; color: #334155; }
ul.legend li { display: flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; width: 18px; height: 12px; border-radius: 3px;
          border: 1.5px solid; }
.swatch.action { background: #dbeafe; border-color: #1d4ed8; }
.swatch.state { background: #dcfce7; border-color: #15803d; }
.swatch.target { background: #ffffff; border: 3px solid #dc2626; }
.arrow-key { color: #64748b; font-weight: bold; }
div.picture { overflow: auto; border: 1px solid #e2e8f0; border-radius: 6px;
              background: #ffffff; }
svg.why { display: block; max-width: 100%; height: auto; }
svg.why text { font: 12px "DejaVu Sans Mono", ui-monospace, Menlo, Consolas, monospace;
               fill: #0f172a; }
svg.why text.head { font-weight: bold; }
svg.why text.ids { fill: #475569; font-size: 11px; }
svg.why text.band-label { font: bold 13px system-ui, sans-serif; fill: #475569; }
.band rect { fill: #f8fafc; }
.band.odd rect { fill: #f1f5f9; }
.node rect.box { stroke-width: 1.5; }
.node.action rect.box { fill: #dbeafe; stroke: #1d4ed8; }
.node.state rect.box { fill: #dcfce7; stroke: #15803d; }
.node.target rect.box { stroke: #dc2626; stroke-width: 3.5; }
.node text.tag { fill: #dc2626; }
path.edge { fill: none; stroke: #64748b; stroke-width: 1.6; }
path.arrowhead { fill: #64748b; }
table.steps { border-collapse: collapse; margin-top: 18px; font-size: 12.5px; width: 100%; }
table.steps th, table.steps td { border-bottom: 1px solid #e2e8f0; padding: 4px 8px;
                                 text-align: left; vertical-align: top; }
table.steps td.text, table.steps td.ids { font-family: "DejaVu Sans Mono", monospace;
                                          overflow-wrap: anywhere; }
table.steps tr.target td { background: #fef2f2; }
""".strip()

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'"


def _svg(nodes: list[_Node], edges: list[tuple[str, str]], title: str) -> list[str]:
    boxes, bands, width, height = _layout(nodes, edges)
    out = [
        f'<svg class="why" id="why-graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="why-graph-title">',
        f'<title id="why-graph-title">{_h(title)}</title>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path class="arrowhead" d="M0,0 L10,5 L0,10 z"/>'
        "</marker></defs>",
        '<g class="layer-bands">',
    ]
    for turn, x0, x1, odd in bands:
        label = "turn ?" if turn < 0 else f"turn {turn}"
        cls = "band odd" if odd else "band"
        out.append(
            f'<g class="{cls}" data-turn="{turn}"><rect x="{x0}" y="{MARGIN}" '
            f'width="{x1 - x0}" height="{height - 2 * MARGIN}" rx="8"/>'
            f'<text class="band-label" x="{x0 + BAND_PAD}" y="{MARGIN + 22}">{label}</text></g>'
        )
    out.append("</g>")
    kinds = {n.uid: f"{n.kind} at {n.turn_label}" for n in nodes}
    out.append('<g class="layer-edges">')
    for i, (src, dst, d) in enumerate(_edge_paths(boxes, edges)):
        out.append(
            f'<path class="edge" id="edge-{i}" data-from="{_h(src)}" data-to="{_h(dst)}" '
            f'd="{d}" marker-end="url(#arrow)"><title>{_h(kinds[src])} causes '
            f"{_h(kinds[dst])}</title></path>"
        )
    out.append("</g>")
    out.append('<g class="layer-nodes">')
    for b in boxes:
        n = b.node
        cls = f"node {n.kind}" + (" target" if n.target else "")
        turn_attr = "" if n.turn is None else str(n.turn)
        hops_attr = "" if n.hops is None else str(n.hops)
        tooltip = n.text + (("\nidentifiers: " + ", ".join(n.identifiers)) if n.identifiers else "")
        tag = ' <tspan class="tag">◆ target</tspan>' if n.target else ""
        out.append(
            f'<g class="{cls}" id="{n.sid}" data-uid="{_h(n.uid)}" data-turn="{turn_attr}" '
            f'data-kind="{n.kind}" data-hops="{hops_attr}" transform="translate({b.x},{b.y})">'
        )
        out.append(f"<title>{_h(tooltip)}</title>")
        out.append(f'<rect class="box" width="{BOX_W}" height="{b.h}" rx="6"/>')
        # A nested <svg> clips its content: text wider than estimated cannot spill out.
        out.append(f'<svg class="clip" width="{BOX_W}" height="{b.h}">')
        y = PAD + 13
        out.append(
            f'<text class="head" x="{PAD}" y="{y}">{_h(n.turn_label)} · {n.kind}{tag}</text>'
        )
        y += HEAD_H
        for line in b.text_lines:
            out.append(f'<text class="body" x="{PAD}" y="{y}">{_h(line)}</text>')
            y += LINE_H
        if b.ident_lines:
            y += 4
            for line in b.ident_lines:
                out.append(f'<text class="ids" x="{PAD}" y="{y - 1}">{_h(line)}</text>')
                y += IDENT_H
        out.append("</svg></g>")
    out.append("</g></svg>")
    return out


def _table(nodes: list[_Node], edges: list[tuple[str, str]]) -> list[str]:
    label = {n.uid: f"{n.kind} at {n.turn_label}" for n in nodes}
    causes: dict[str, list[str]] = {}
    for src, dst in edges:
        causes.setdefault(src, []).append(label[dst])
    out = [
        '<table class="steps"><thead><tr><th>turn</th><th>kind</th><th>hops</th>'
        "<th>text</th><th>identifiers</th><th>causes</th></tr></thead><tbody>"
    ]
    for n in nodes:
        cls = "step target" if n.target else "step"
        caused = "; ".join(sorted(set(causes.get(n.uid, []))))
        out.append(
            f'<tr class="{cls}" data-turn="{"" if n.turn is None else n.turn}">'
            f"<td>{_h(n.turn_label[5:])}</td><td>{n.kind}</td>"
            f"<td>{'' if n.hops is None else n.hops}</td>"
            f'<td class="text">{_h(n.text)}</td>'
            f'<td class="ids">{_h(", ".join(n.identifiers))}</td><td>{_h(caused)}</td></tr>'
        )
    out.append("</tbody></table>")
    return out


def render_html(
    chain: Sequence[Mapping[str, Any]], *, trajectory: str, target: str, depth: int
) -> str:
    """One self-contained page: title, legend, the SVG picture, and a table of the steps."""
    nodes, edges = _prepare(chain)
    title = _title(trajectory, target)
    targets = sorted({n.turn_label for n in nodes if n.target})
    sub = (
        f"depth {_h(depth)} · {len(nodes)} nodes · {len(edges)} CAUSES edges"
        + (f" · target: {_h(', '.join(targets))}" if targets else "")
        + " · oldest first: time flows left to right"
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="trajgraph-nodes" content="{len(nodes)}">',
        f'<meta name="trajgraph-edges" content="{len(edges)}">',
        f'<meta name="trajgraph-target" content="{_h(_clean(target, 200))}">',
        f"<title>{_h(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{_h(title)}</h1>",
    ]
    if not nodes:
        out += [f'<p class="sub empty">{_h(EMPTY)} (depth {_h(depth)})</p>', "</body>", "</html>"]
        return "\n".join(out) + "\n"
    out += [
        f'<p class="sub">{sub}</p>',
        '<ul class="legend">',
        '<li><span class="swatch action"></span>action: the command a turn ran</li>',
        '<li><span class="swatch state"></span>state: a fact an observation showed</li>',
        '<li><span class="swatch target"></span>the target (hops 0)</li>',
        '<li><span class="arrow-key">⟶</span>CAUSES</li>',
        "<li>columns: turns, action then states</li>",
        "</ul>",
        '<div class="picture">',
        *_svg(nodes, edges, title),
        "</div>",
        *_table(nodes, edges),
        "</body>",
        "</html>",
    ]
    return "\n".join(out) + "\n"
