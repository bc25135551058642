"""The report's pictures: BLEU / chrF by source and by reference length with a line per
encoding, and the validation loss of every run against its updates."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional, Sequence

from ..evaluation import BucketScore, plot_buckets
from .length_bins import BEYOND


def length_plot(report: dict[str, Any], path: Path) -> Optional[Path]:
    """Per test split two panels, by source length and by reference length, a line per
    encoding (the mean over its seeds; a bin of few sentences hollow on a grey band); None
    when no run has been scored yet."""
    panels: dict[str, dict[str, list[BucketScore]]] = {}
    axis: dict[str, str] = {}
    for row in report["summary"]:
        for key, side in (("buckets", "source"), ("target_buckets", "reference")):
            bins = [BucketScore(b["label"], b["sentences"], b["untranslated"], b["bleu"],
                                b["chrf"])
                    for b in row.get(key) or [] if b["label"] != BEYOND]
            if bins:
                panel = f"{row['split']}, by {side} length"
                panels.setdefault(panel, {})[row["encoding"]] = bins
                axis[panel] = f"{side} length (Moses tokens)"
    if not panels:
        return None
    return plot_buckets(panels, path, "BLEU and chrF by source and reference length (mean "
                                      "over seeds)", axis=axis)


def loss_plot(runs: Sequence[dict[str, Any]], path: Path) -> Path:
    """Validation loss against updates: a colour per encoding, a line style per seed."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    encodings = list(dict.fromkeys(r["encoding"] for r in runs))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    for run in runs:
        if not run["validation"]:
            continue
        updates, losses = zip(*run["validation"])
        ax.plot(updates, losses, marker=".",
                color=colours[encodings.index(run["encoding"]) % len(colours)],
                linestyle=styles[(run["seed"] - 1) % len(styles)],
                label=f"{run['encoding']} seed {run['seed']}")
    ax.set_xlabel("updates")
    ax.set_ylabel("validation loss (label-smoothed cross-entropy, base 2)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
