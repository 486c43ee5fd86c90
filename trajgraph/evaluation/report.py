"""Tables and plots of the evaluation harness's rows (one row per episode, question, method).

* ``table``: mean of a metric per method (rows) and capability (columns), plus overall;
* ``domain_table``: the same per domain;
* ``markdown`` (synthetic, per horizon) and ``markdown_real`` (per capability and domain,
  with the share of the whole-trajectory ceiling): the README's tables;
* ``plot``: a metric against horizon.

A question without a value for a metric (no needles, no key terms) is left out of its means.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trajgraph.core.errors import ConfigError
from trajgraph.evaluation.episodes import CAPABILITY_ORDER

CEILING = "whole_trajectory"


def _means(rows: list[dict[str, Any]], metric: str, key: str) -> dict[tuple[str, str], float]:
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        by[(r["method"], str(r.get(key, "-")))].append(r[metric])
        by[(r["method"], "overall")].append(r[metric])
    return {k: statistics.mean(v) for k, v in by.items()}


def _columns(rows: list[dict[str, Any]], key: str, metric: str) -> list[str]:
    return group_order({str(r.get(key, "-")) for r in rows if r.get(metric) is not None})


def group_order(present: Iterable[str]) -> list[str]:
    """Capabilities in their usual order, then anything else (domains) alphabetically."""
    names = set(present)
    ordered = [c for c in CAPABILITY_ORDER if c in names]
    return ordered + sorted(names - set(ordered))


def table(rows: list[dict[str, Any]], metric: str = "needle_recall", key: str = "type") -> str:
    """Mean ``metric`` per method (rows) and ``key`` (columns: capability, or domain), plus
    overall; a question without a value for the metric is left out of that mean."""
    means = _means(rows, metric, key)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cols = [*_columns(rows, key, metric), "overall"]
    width = max([20, *(len(c) + 2 for c in cols)])
    out = [f"{metric:<20}" + "".join(f"{c:>{width}}" for c in cols)]
    for m in methods:
        out.append(
            f"{m:<20}"
            + "".join(
                f"{means[(m, c)]:>{width}.2f}" if (m, c) in means else f"{'-':>{width}}"
                for c in cols
            )
        )
    return "\n".join(out)


def domain_table(rows: list[dict[str, Any]], metric: str = "coverage") -> str:
    return table(rows, metric, key="domain")


def markdown_real(rows: list[dict[str, Any]], metric: str = "coverage") -> str:
    """Two README tables: per capability (with the share of the whole-trajectory ceiling) and
    per domain; one row per method."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    caps = _columns(rows, "type", metric)
    by_cap = _means(rows, metric, "type")
    ceiling = by_cap.get((CEILING, "overall"))
    n = len({(r["episode"], r["question"]) for r in rows if r.get(metric) is not None})
    lines = [
        f"{metric} ({n} questions) | "
        + " | ".join(c.replace("_", " ") for c in caps)
        + " | overall | × ceiling |",
        "|---|" + "---:|" * (len(caps) + 2),
    ]
    lines[0] = "| " + lines[0]
    for m in methods:
        cells = [f"{by_cap[(m, c)]:.3f}" if (m, c) in by_cap else "-" for c in caps]
        overall = by_cap.get((m, "overall"))
        share = f"{overall / ceiling:.2f}" if overall is not None and ceiling else "-"
        total = f"{overall:.3f}" if overall is not None else "-"
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {total} | {share} |")
    domains = _columns(rows, "domain", metric)
    by_dom = _means(rows, metric, "domain")
    lines += ["", "| by domain | " + " | ".join(domains) + " |", "|---|" + "---:|" * len(domains)]
    for m in methods:
        cells = [f"{by_dom[(m, d)]:.3f}" if (m, d) in by_dom else "-" for d in domains]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def by_horizon(rows: list[dict[str, Any]], metric: str) -> dict[str, dict[str, dict[int, float]]]:
    """{capability or "overall": {method: {horizon: mean metric}}}: the series of the plot."""
    acc: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        for cap in (r["type"], "overall"):
            acc[(cap, r["method"], r["horizon"])].append(r[metric])
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (cap, method, horizon), values in sorted(acc.items()):
        out[cap][method][horizon] = statistics.mean(values)
    return {c: dict(m) for c, m in out.items()}


def markdown(rows: list[dict[str, Any]], metric: str, capabilities: Sequence[str]) -> str:
    """A README table: one row per method, one column per horizon, each cell the scores of
    ``capabilities`` in order (``causal · state_updating · overall``)."""
    series = by_horizon(rows, metric)
    horizons = sorted({r["horizon"] for r in rows})
    caps = [c for c in capabilities if c in series]
    lines = [
        f"| method ({' · '.join(caps)}) | " + " | ".join(f"{h // 1000}k" for h in horizons) + " |",
        "|---|" + "---:|" * len(horizons),
    ]
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = [
            " · ".join(f"{series[c].get(method, {}).get(h, float('nan')):.2f}" for c in caps)
            for h in horizons
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pyplot() -> Any:
    """matplotlib.pyplot (headless), or ConfigError naming the extra that installs it; the
    harness asks before the run, so a missing matplotlib does not cost an evaluation."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'trajgraph[eval]' (or .[dev])"
        ) from e
    return plt


def plot(rows: list[dict[str, Any]], path: Path, *, metric: str, title: str) -> None:
    """Score against horizon, one panel per capability and overall, one line per method."""
    plt = pyplot()
    series = by_horizon(rows, metric)
    caps = [c for c in ("causal", "state_updating", "recall", "overall") if c in series]
    horizons = sorted({r["horizon"] for r in rows})
    cols = 2 if len(caps) > 1 else 1
    nrows = (len(caps) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.4 * nrows + 0.9), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, cap in zip(flat, caps, strict=False):
        for method, points in series[cap].items():
            xs = sorted(points)
            style = "-" if method.startswith("trajgraph") else "--"
            main = method == "trajgraph_auto"  # what users get: drawn on top, and thicker
            ax.plot(
                xs,
                [points[x] for x in xs],
                style,
                marker="o",
                label=method,
                linewidth=3.2 if main else 1.4,
                zorder=3 if main else 2,
                alpha=1.0 if main else 0.8,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(horizons, [f"{h // 1000}k" for h in horizons])
        ax.minorticks_off()
        ax.set_title(cap)
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
    for ax in flat[len(caps) :]:
        ax.set_visible(False)
    flat[-1].set_xlabel("horizon (tokens)")
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
