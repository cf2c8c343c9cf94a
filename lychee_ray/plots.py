"""Markdown tables and PNG charts for the evaluation report and the ablation grid.

The evaluate stage and the ablation runner hand plain rows and series to these helpers; they
format, never compute metrics. Charts use matplotlib's object API (`Figure` + Agg canvas), not
pyplot, so they need no display, change no global backend and are safe in Ray workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "MISSING",
    "bar_chart",
    "line_chart",
    "markdown_table",
    "pareto_front",
    "scatter_labeled",
]

MISSING = "n/a"  # how a missing or NaN cell is shown
DPI = 120

Format = str | Callable[[object], str]


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------
def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: object, fmt: Format | None) -> str:
    if _is_missing(value):
        return MISSING
    if callable(fmt):
        text = fmt(value)
    elif fmt is not None:
        text = format(value, fmt)
    elif isinstance(value, float):
        text = f"{value:.3f}"  # a readable default; pass formats for anything else
    else:
        text = str(value)
    # A pipe would end the cell and a newline the row.
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(
    rows: Sequence[Mapping[str, object]],
    columns: Sequence[str],
    formats: Mapping[str, Format] | None = None,
) -> str:
    """GitHub-flavoured Markdown table of `rows` restricted to `columns`, in that order.

    `formats` maps a column to a format spec (".3f", ".1%", ",d") or a callable; other floats
    get ".3f". Missing keys, None and NaN show as MISSING. Columns whose present values are all
    numbers are right-aligned. Ends with a newline.
    """
    if not columns:
        raise ValueError("markdown_table needs at least one column")
    formats = formats or {}
    body = [[_cell(row.get(col), formats.get(col)) for col in columns] for row in rows]
    align = []
    for col in columns:
        present = [row.get(col) for row in rows if not _is_missing(row.get(col))]
        align.append("---:" if present and all(_is_number(v) for v in present) else "---")
    header = [str(c).replace("|", "\\|") for c in columns]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Charts
# --------------------------------------------------------------------------------------------
def _new_figure(width: float = 7.5, height: float = 4.5) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _value(v: float | None) -> float:
    return math.nan if v is None else float(v)


def bar_chart(
    path: str | Path,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    title: str,
    ylabel: str,
    value_format: str = "{:.2f}",
) -> Path:
    """Grouped bar chart: one group per category, one bar per series, each bar labelled with its
    value. None/NaN values leave a gap. Returns the PNG path."""
    if not series:
        raise ValueError("bar_chart needs at least one series")
    for name, values in series.items():
        if len(values) != len(categories):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(categories)} categories")
    n_series = len(series)
    width = 0.8 / n_series
    fig = _new_figure(width=max(6.0, 1.1 * len(categories) * max(1, n_series) ** 0.5 + 2.0))
    ax = fig.add_subplot()
    for i, (name, values) in enumerate(series.items()):
        xs = [c + (i - (n_series - 1) / 2) * width for c in range(len(categories))]
        ys = [_value(v) for v in values]
        bars = ax.bar(xs, ys, width=width * 0.95, label=name)
        labels = ["" if math.isnan(y) else value_format.format(y) for y in ys]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(range(len(categories)), list(categories))
    if max((len(str(c)) for c in categories), default=0) * len(categories) > 60:
        ax.tick_params(axis="x", labelrotation=30)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.12)  # head room for the value labels
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if n_series > 1:
        ax.legend(fontsize=8)
    return _save(fig, path)


def line_chart(
    path: str | Path,
    x: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    log_x: bool = False,
) -> Path:
    """One marked line per series over the shared `x` (e.g. recall vs. token budget); `log_x`:
    a logarithmic x axis (sizes a decade apart)."""
    if not series:
        raise ValueError("line_chart needs at least one series")
    fig = _new_figure()
    ax = fig.add_subplot()
    for name, values in series.items():
        if len(values) != len(x):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(x)} x values")
        ax.plot(list(x), [_value(v) for v in values], marker="o", label=name)
    if log_x:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _save(fig, path)


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Points not dominated by any other, where lower x and higher y are better (cost vs.
    accuracy). A point is dominated if another is <= in x and >= in y and differs in one.
    Returned in increasing x. Exact duplicates are all kept."""
    front = []
    for label, x, y in points:
        dominated = any((ox <= x and oy >= y) and (ox < x or oy > y) for _, ox, oy in points)
        if not dominated:
            front.append((label, x, y))
    return sorted(front, key=lambda p: (p[1], -p[2]))


def scatter_labeled(
    path: str | Path,
    points: Sequence[tuple[str, float, float]],
    title: str,
    xlabel: str,
    ylabel: str,
    pareto: bool = True,
) -> Path:
    """Scatter of (label, x, y) points, each annotated with its label. With `pareto`, the
    Pareto-optimal points (lower x better, higher y better) are highlighted and joined by a
    step line, e.g. tokens per question vs. judge accuracy for the ablation grid."""
    fig = _new_figure()
    ax = fig.add_subplot()
    points = [(str(lbl), float(x), float(y)) for lbl, x, y in points]
    ax.scatter([p[1] for p in points], [p[2] for p in points], s=30, color="tab:blue", zorder=2)
    for label, x, y in points:
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if pareto and points:
        front = pareto_front(points)
        fx, fy = [p[1] for p in front], [p[2] for p in front]
        ax.step(fx, fy, where="post", color="tab:red", alpha=0.6, zorder=1, label="Pareto front")
        ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="tab:red", zorder=3)
        ax.legend(fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.margins(0.1)
    return _save(fig, path)
