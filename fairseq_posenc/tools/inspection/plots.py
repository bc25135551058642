"""Draw a :class:`~.records.Picture` as a PNG with matplotlib (Agg: no display needed).

Decisions: one figure per picture, a grid of panels (curves: one panel per layer group,
at most 4 across; heatmaps: one row per layer group, one column per head) that share one
colour scale, so heads and layers compare at a glance; signed biases use a diverging map
centred at 0, factors one centred at 1, probabilities and norms a sequential one. Small
figures at 80 dpi (a report may hold dozens), each closed after saving.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

# fairseq's import leaves the root logger at DEBUG: keep matplotlib's start-up and font
# search quiet (set before its import, which already logs).
logging.getLogger("matplotlib").setLevel(logging.WARNING)

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..textprep.text import JOINER  # noqa: E402
from .records import CurvePanel, HeatmapPanel, Picture  # noqa: E402

DPI = 80
#: Tick labels are drawn only up to this many rows / columns (tokens stay readable).
MAX_TICK_LABELS = 40


def _grid(picture: Picture) -> tuple[int, int]:
    count = len(picture.panels)
    if picture.kind == "heatmaps":
        groups = len({panel.layers for panel in picture.panels}) or 1
        return groups, math.ceil(count / groups)
    cols = min(count, 4)
    return math.ceil(count / cols), cols


def _colour_range(picture: Picture, values: list[np.ndarray]) -> tuple[str, float, float]:
    finite = np.concatenate([v[np.isfinite(v)].ravel() for v in values]) if values else []
    lo, hi = (float(np.min(finite)), float(np.max(finite))) if len(finite) else (0.0, 1.0)
    if picture.scale == "sequential":
        return "viridis", lo, hi
    centre = 1.0 if picture.scale == "factor" else 0.0
    half = max(abs(lo - centre), abs(hi - centre)) or 1.0
    return "RdBu_r", centre - half, centre + half


def _numeric(labels: list[str]) -> bool:
    return bool(labels) and all(label.lstrip("-").isdigit() for label in labels)


def _axis(labels: list[str]) -> tuple[float, float]:
    """Image extent along an axis: numeric labels (positions, distances) place the cells
    at their values, so matplotlib's own ticks are right (and few); otherwise indices."""
    if _numeric(labels):
        return int(labels[0]) - 0.5, int(labels[-1]) + 0.5
    return -0.5, max(len(labels), 1) - 0.5


def _token_ticks(ax, picture: Picture) -> None:
    """Tokens and segment names as tick labels (positions use the numeric extent)."""
    for labels, axis in ((picture.col_labels, ax.xaxis), (picture.row_labels, ax.yaxis)):
        if labels and not _numeric(labels) and len(labels) <= MAX_TICK_LABELS:
            # The tokenizer's joiner (U+FFED, "attached to the previous token") has no
            # glyph in matplotlib's font: drawn as a middle dot; the JSON keeps the token.
            shown = [label.replace(JOINER, "\u00b7") for label in labels]
            axis.set_ticks(range(len(labels)), shown, fontsize=7,
                           rotation=90 if axis is ax.xaxis else 0)


def _heatmaps(picture: Picture, axes: np.ndarray) -> None:
    values = [np.asarray(p.values, dtype=float) for p in picture.panels]
    cmap, lo, hi = _colour_range(picture, values)
    (x0, x1), (y0, y1) = _axis(picture.col_labels), _axis(picture.row_labels)
    image = None
    for index, (ax, panel, matrix) in enumerate(zip(axes.flat, picture.panels, values)):
        assert isinstance(panel, HeatmapPanel)
        image = ax.imshow(matrix, cmap=cmap, vmin=lo, vmax=hi, aspect="auto",
                          interpolation="nearest", extent=(x0, x1, y1, y0))
        ax.set_title(panel.title, fontsize=8)
        row, col = divmod(index, axes.shape[1])
        if row == axes.shape[0] - 1 or index + axes.shape[1] >= len(values):
            ax.set_xlabel(picture.xlabel, fontsize=7)
        if col == 0:
            ax.set_ylabel(picture.ylabel, fontsize=7)
        ax.tick_params(labelsize=7)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(integer=True))  # positions are integers
        _token_ticks(ax, picture)
    if image is not None:
        axes.flat[0].figure.colorbar(image, ax=list(axes.flat), shrink=0.8)


def _curves(picture: Picture, axes: np.ndarray) -> None:
    for ax, panel in zip(axes.flat, picture.panels):
        assert isinstance(panel, CurvePanel)
        for label, ys in panel.series.items():
            ax.plot(picture.x, ys, label=label, linewidth=1.2,
                    marker="." if len(picture.x) <= 40 else None)
        ax.axvline(0, color="grey", linewidth=0.5)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(picture.xlabel, fontsize=8)
        ax.set_ylabel(picture.ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        if len(panel.series) <= 16:
            ax.legend(fontsize=6, ncol=2 if len(panel.series) > 4 else 1)


def draw(picture: Picture, directory: Path) -> Path:
    """Write ``{key}.png`` in ``directory``; returns its path."""
    rows, cols = _grid(picture)
    cell = 2.6 if picture.kind == "heatmaps" else 3.6
    width, height = max(cell * cols + 1.2, 5.0), cell * rows + 0.8  # room for the title
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    # Fixed margins in inches: a layout engine measures every tick label, which took
    # most of the drawing time of a report.
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.3 / width, bottom=0.75 / height,
                        top=1 - 0.55 / height, wspace=0.35, hspace=0.5)
    try:
        (_heatmaps if picture.kind == "heatmaps" else _curves)(picture, axes)
        for ax in axes.flat[len(picture.panels):]:
            ax.set_visible(False)
        fig.suptitle(picture.title, fontsize=10)
        path = directory / f"{picture.key}.png"
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path
