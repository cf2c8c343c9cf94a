"""Markdown tables and PNG charts (lychee_ray.plots)."""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys

import pytest

from lychee_ray.plots import (
    bar_chart,
    line_chart,
    markdown_table,
    pareto_front,
    scatter_labeled,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"  # the file is complete
    return struct.unpack(">II", data[16:24])


# ------------------------------------------------------------------------------------ markdown
def test_markdown_table_formats_aligns_and_marks_missing():
    rows = [
        {"system": "lychee (rules)", "f1": 0.51234, "n": 10, "extra": "ignored"},
        {"system": "bm25", "f1": None, "n": 3},
        {"system": "naive|rag", "f1": float("nan")},
    ]
    table = markdown_table(rows, ["system", "f1", "n"], {"f1": ".1%"})
    assert table == (
        "| system | f1 | n |\n"
        "| --- | ---: | ---: |\n"
        "| lychee (rules) | 51.2% | 10 |\n"
        "| bm25 | n/a | 3 |\n"
        "| naive\\|rag | n/a | n/a |\n"
    )


def test_markdown_table_default_float_format_and_callables():
    table = markdown_table(
        [{"a": 1 / 3, "b": 1234567, "c": "two\nlines"}],
        ["a", "b", "c"],
        {"b": lambda v: f"{v / 1e6:.1f}M"},
    )
    assert table.splitlines()[2] == "| 0.333 | 1.2M | two lines |"
    with pytest.raises(ValueError):
        markdown_table([], [])
    assert markdown_table([], ["x"]) == "| x |\n| --- |\n"


# -------------------------------------------------------------------------------------- charts
def test_bar_chart_writes_a_valid_png(tmp_path):
    path = bar_chart(
        tmp_path / "sub" / "bars.png",
        ["multi_hop", "temporal", "open_domain", "single_hop"],
        {"lychee": [0.41, 0.52, 0.3, 0.66], "bm25": [0.2, None, 0.1, 0.5]},
        title="F1 by category",
        ylabel="F1",
    )
    assert path.exists() and path.stat().st_size > 1000
    width, height = _png_size(path)
    assert width >= 700 and height == 540  # 4.5 in at 120 dpi


def test_bar_chart_labels_every_present_bar(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    seen = []
    real = Axes.bar_label

    def spy(self, container, labels=None, **kw):
        seen.append(list(labels))
        return real(self, container, labels=labels, **kw)

    monkeypatch.setattr(Axes, "bar_label", spy)
    bar_chart(tmp_path / "b.png", ["x", "y"], {"s1": [0.5, None], "s2": [1.0, 0.25]}, "t", "v")
    assert seen == [["0.50", ""], ["1.00", "0.25"]]


def test_bar_chart_rejects_mismatched_series(tmp_path):
    with pytest.raises(ValueError):
        bar_chart(tmp_path / "b.png", ["a", "b"], {"s": [1.0]}, "t", "y")
    with pytest.raises(ValueError):
        bar_chart(tmp_path / "b.png", ["a"], {}, "t", "y")


def test_line_chart_writes_a_valid_png(tmp_path):
    path = line_chart(
        tmp_path / "recall.png",
        [250, 500, 1000, 1500, 2000],
        {"lychee": [0.3, 0.45, 0.6, 0.7, 0.74], "naive_rag": [0.2, 0.3, 0.4, None, 0.5]},
        title="Evidence recall vs. budget",
        xlabel="context tokens",
        ylabel="recall",
    )
    assert _png_size(path) == (900, 540)
    with pytest.raises(ValueError):
        line_chart(tmp_path / "x.png", [1, 2], {"s": [1.0]}, "t", "x", "y")


def test_scatter_labeled_writes_a_valid_png(tmp_path):
    points = [("full", 3900, 0.71), ("no_mmr", 3500, 0.66), ("eager", 9000, 0.70), ("rules", 0, 0.4)]
    for pareto in (True, False):
        path = scatter_labeled(
            tmp_path / f"pareto_{pareto}.png", points, "Cost vs. accuracy", "tokens", "J", pareto
        )
        assert _png_size(path) == (900, 540)


def test_charts_do_not_import_pyplot(tmp_path):
    """No pyplot means no global backend switch and no GUI state in Ray workers."""
    code = (
        "import sys; from lychee_ray.plots import bar_chart, scatter_labeled;"
        f"bar_chart({str(tmp_path / 'b.png')!r}, ['a'], {{'s': [1.0]}}, 't', 'y');"
        f"scatter_labeled({str(tmp_path / 's.png')!r}, [('p', 1, 2)], 't', 'x', 'y');"
        "assert 'matplotlib.pyplot' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "MPLBACKEND": "TkAgg"})
    assert (tmp_path / "b.png").exists() and (tmp_path / "s.png").exists()


# -------------------------------------------------------------------------------------- pareto
def test_pareto_front_lower_x_higher_y():
    points = [("a", 1, 0.5), ("b", 2, 0.7), ("c", 3, 0.6), ("d", 0.5, 0.2), ("e", 2, 0.7), ("f", 1, 0.4)]
    # c is dominated by b (cheaper and better), f by a (same cost, worse); b and e are duplicates.
    assert pareto_front(points) == [("d", 0.5, 0.2), ("a", 1, 0.5), ("b", 2, 0.7), ("e", 2, 0.7)]
    assert pareto_front([]) == []
    assert [p[0] for p in pareto_front([("x", 1.0, 1.0), ("y", math.inf, 0.0)])] == ["x"]
