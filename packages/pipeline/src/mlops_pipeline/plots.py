"""Small matplotlib charts rendered to inline SVG, so the report is one self-contained file with no script."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any


def _figure(width: float = 6.4, height: float = 3.2) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files, searchable labels
    return plt.subplots(figsize=(width, height), dpi=100)


def _svg(fig: Any, plot_id: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG in HTML
    return svg.replace("<svg ", f'<svg data-plot="{plot_id}" role="img" ', 1)


def line_chart(plot_id: str, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *, title: str,
               xlabel: str, ylabel: str) -> str:
    """One line per named ``(x, y)`` series."""
    fig, ax = _figure()
    for name, (x, y) in series.items():
        ax.plot(list(x), list(y), label=name, linewidth=1.5)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return _svg(fig, plot_id)


def interval_chart(plot_id: str, rows: Sequence[tuple[str, float, float, float]], *, title: str, xlabel: str,
                   threshold: float | None = None) -> str:
    """Point estimates with confidence intervals: rows of ``(label, estimate, low, high)``."""
    fig, ax = _figure(height=max(2.0, 0.5 * len(rows) + 1.2))
    labels = [r[0] for r in rows]
    est = [r[1] for r in rows]
    lo = [r[1] - r[2] for r in rows]
    hi = [r[3] - r[1] for r in rows]
    ax.errorbar(est, range(len(rows)), xerr=[lo, hi], fmt="o", capsize=4)
    ax.set_yticks(range(len(rows)), labels)
    ax.axvline(0, color="grey", linewidth=0.8)
    if threshold is not None:
        ax.axvline(threshold, color="tab:red", linestyle="--", linewidth=1, label=f"required {threshold:+.3f}")
        ax.legend(loc="lower right")
    ax.set(title=title, xlabel=xlabel)
    ax.grid(alpha=0.3, axis="x")
    return _svg(fig, plot_id)


def distribution_chart(plot_id: str, samples: Mapping[str, Sequence[float]], *, title: str, xlabel: str) -> str:
    """Overlaid histograms of named samples (e.g. latency of champion vs candidate)."""
    fig, ax = _figure()
    for name, values in samples.items():
        if len(values):
            ax.hist(list(values), bins=40, alpha=0.5, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel="count")
    ax.legend()
    return _svg(fig, plot_id)


def bar_chart(plot_id: str, values: Mapping[str, float], *, title: str, ylabel: str,
              thresholds: Mapping[str, float] | None = None, colors: Sequence[str] | None = None) -> str:
    """Bars per label with optional horizontal threshold lines."""
    fig, ax = _figure(height=3.6)
    labels = list(values)
    ax.bar(range(len(labels)), [values[k] for k in labels], color=colors)
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right")
    for name, level in (thresholds or {}).items():
        ax.axhline(level, linestyle="--", linewidth=1, color="tab:red" if "crit" in name.lower() else "tab:orange",
                   label=f"{name} {level:g}")
    if thresholds:
        ax.legend()
    ax.set(title=title, ylabel=ylabel)
    ax.grid(alpha=0.3, axis="y")
    return _svg(fig, plot_id)


def grouped_bar_chart(plot_id: str, groups: Mapping[str, Mapping[str, float]], *, title: str) -> str:
    """One panel per metric comparing named variants, e.g. ``{"p99 ms": {"stable": 3, "canary": 4}}``."""
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"
    n = max(1, len(groups))
    fig, axes = plt.subplots(1, n, figsize=(2.6 * n, 3.0), dpi=100, squeeze=False)
    for ax, (metric, variants) in zip(axes[0], groups.items(), strict=False):
        ax.bar(range(len(variants)), list(variants.values()),
               color=["tab:blue", "tab:orange", "tab:green"][: len(variants)])
        ax.set_xticks(range(len(variants)), list(variants), rotation=30, ha="right", fontsize=8)
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title)
    return _svg(fig, plot_id)


def timeline_chart(plot_id: str, events: Sequence[tuple[float, str, str]], *, title: str) -> str:
    """Ledger events as points on a time axis: ``(seconds since start, lane (alias), label)``."""
    fig, ax = _figure(height=3.0)
    lanes = list(dict.fromkeys(e[1] for e in events))
    for t, lane, label in events:
        y = lanes.index(lane)
        ax.plot([t], [y], "o", color="tab:blue")
        ax.annotate(label, (t, y), textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set(title=title, xlabel="seconds since the first ledger entry")
    ax.grid(alpha=0.3, axis="x")
    return _svg(fig, plot_id)
