"""The extrapolation study of ``posenc-compare --train-max-len N``: every run trains on the
pairs of at most ``N`` tokens per side, and every test split is scored in bins of source
length relative to ``N`` -- the figure of ALiBi's and AT5's papers.

Lengths are fairseq's count, the one ``--task translation_extrapolation --train-max-len``
filters with (:mod:`fairseq_posenc.plugin.extrapolation`): a sentence's subword tokens plus the end
of sentence, read from the binarized data.

* :func:`train_limit` counts the training pairs the task keeps (both sides at most ``N``
  tokens) and drops; :func:`check_train_limit` stops a limit that keeps fewer than
  :data:`MIN_TRAIN_PAIRS`, before any training, saying how many remain.
* :data:`RELATIVE_EDGES` are the bins ``(0, N], (N, 1.5N], (1.5N, 2N], (2N, 3N], (3N,
  inf)``; :func:`relative_bins` gives them in whole tokens (a length ``L`` is in ``(aN,
  bN]`` when ``aN < L <= bN``), :func:`entries` scores a row's translations in them (per bin:
  the sentences, whether they are few, each seed's BLEU and chrF, their mean) and
  :func:`add_entries` puts them in ``report.json`` as ``summary[*].extrapolation``.
* :func:`intro`, :func:`reading`, :func:`blocks` and :func:`draw`: the report's words, its
  tables and one plot per test split (BLEU and chrF against source length over ``N``, a
  line per row, the mean over seeds with the seeds' range shaded, a bin of few sentences
  hollow on a grey band).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..evaluation import FEW, by_length, is_few
from ..evaluation.buckets import column
from ..textprep.files import read_lines
from . import convergence
from .data import Corpus, source_lengths
from .execute import METRIC, say

#: The fewest training pairs ``--train-max-len`` may leave.
MIN_TRAIN_PAIRS = 1000

#: Lower edges of the relative bins, as multiples of N; the last bin is open.
RELATIVE_EDGES = (Fraction(0), Fraction(1), Fraction(3, 2), Fraction(2), Fraction(3))


@dataclass(frozen=True)
class TrainLimit:
    """What ``--train-max-len n`` leaves of the training split."""

    n: int
    kept: int  # pairs with both sides at most n tokens (with </s>)
    dropped: int
    longest: int  # the longest kept source or target, in tokens with </s> (0: none kept)
    longest_source: int  # the longest kept source
    fewest_n: Optional[int]  # the smallest limit that keeps MIN_TRAIN_PAIRS (None: none)

    def to_json(self) -> dict[str, int]:
        return {"n": self.n, "kept": self.kept, "dropped": self.dropped}


def count_kept(source_sizes: Sequence[int], target_sizes: Sequence[int], n: int) -> TrainLimit:
    """The pairs fairseq's size filter keeps at ``--train-max-len n``: both sides at most
    ``n`` tokens (the sizes count the end of sentence)."""
    if len(source_sizes) != len(target_sizes):
        raise ValueError(f"{len(source_sizes)} sources but {len(target_sizes)} targets")
    kept = [(s, t) for s, t in zip(source_sizes, target_sizes) if s <= n and t <= n]
    longer = sorted(max(s, t) for s, t in zip(source_sizes, target_sizes))
    return TrainLimit(n=n, kept=len(kept), dropped=len(source_sizes) - len(kept),
                      longest=max((max(p) for p in kept), default=0),
                      longest_source=max((s for s, _ in kept), default=0),
                      fewest_n=(longer[MIN_TRAIN_PAIRS - 1] if len(longer) >= MIN_TRAIN_PAIRS
                                else None))


def train_limit(corpus: Corpus, n: int) -> TrainLimit:
    """:func:`count_kept` of the corpus' binarized training split."""
    from ...plugin.extrapolation import source_sizes

    src, tgt = corpus.source_lang, corpus.target_lang
    return count_kept(source_sizes(corpus.bin, "train", src, tgt),
                      source_sizes(corpus.bin, "train", tgt, src), n)


def check_train_limit(limit: TrainLimit) -> None:
    """Stop (SystemExit) when the limit keeps fewer than :data:`MIN_TRAIN_PAIRS` pairs."""
    if limit.kept >= MIN_TRAIN_PAIRS:
        return
    total = limit.kept + limit.dropped
    raise SystemExit(
        f"posenc-compare: --train-max-len {limit.n} keeps {limit.kept:,} of the {total:,} "
        f"training pairs (both sides at most {limit.n} subword tokens with </s>); at least "
        f"{MIN_TRAIN_PAIRS:,} are needed: "
        + (f"raise it to {limit.fewest_n} or more" if limit.fewest_n is not None else
           f"the corpus has fewer than {MIN_TRAIN_PAIRS:,} pairs, train without it"))


def relative_bins(n: int) -> tuple[tuple[int, float], ...]:
    """The relative bins in whole tokens, ``(low, high]`` as
    :func:`fairseq_posenc.tools.evaluation.by_length` takes them: ``aN < L <= bN`` is
    ``floor(aN) < L <= floor(bN)`` for a whole ``L``."""
    if n < 2:
        raise ValueError(f"--train-max-len counts the end of sentence: at least 2, got {n}")
    lows = [math.floor(edge * n) for edge in RELATIVE_EDGES]
    return tuple(zip(lows, [*lows[1:], math.inf]))


def _multiple(edge: Optional[Fraction]) -> Optional[float]:
    if edge is None:
        return None
    return int(edge) if edge.denominator == 1 else float(edge)


def relative_labels() -> list[list[Optional[float]]]:
    """Each bin's ``[lo, hi]`` as multiples of N (``hi`` None for the open bin)."""
    highs: list[Optional[Fraction]] = [*RELATIVE_EDGES[1:], None]
    return [[_multiple(lo), _multiple(hi)] for lo, hi in zip(RELATIVE_EDGES, highs)]


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    given = [v for v in values if v is not None]
    return round(statistics.mean(given), 2) if given else None


def entries(results: dict[int, dict], sources: Sequence[str], refs: Sequence[str],
            lengths: Sequence[int], corpus: Corpus, n: int) -> list[dict[str, Any]]:
    """One row's relative bins: per bin ``bin`` (``[lo, hi]`` in multiples of ``n``),
    ``tokens`` (the same in tokens), ``n`` (test sentences), ``few`` (``n`` under
    :data:`~fairseq_posenc.tools.evaluation.FEW`), ``untranslated``, each seed's
    ``bleu_seeds`` and ``chrf_seeds`` (seed order) and their means ``bleu`` and ``chrf``.
    ``results``: the row's ``result.json`` per seed."""
    bins = relative_bins(n)
    per_seed = []
    for _seed, result in sorted(results.items()):
        hyps = read_lines(Path(result["hypotheses"]))
        skipped = set(result["untranslated"])
        per_seed.append(by_length(sources, hyps, refs, METRIC, corpus.source_lang,
                                  corpus.target_lang, bins=bins, lengths=lengths,
                                  untranslated=[i in skipped for i in range(len(refs))]))
    counts = [sum(low < length <= high for length in lengths) for low, high in bins]
    out = []
    for i, (label, (low, high)) in enumerate(zip(relative_labels(), bins)):
        bleu = [None if s[i].bleu is None else round(s[i].bleu, 2) for s in per_seed]
        chrf = [None if s[i].chrf is None else round(s[i].chrf, 2) for s in per_seed]
        out.append({"bin": label, "tokens": [low, None if math.isinf(high) else int(high)],
                    "n": counts[i], "few": is_few(counts[i]),
                    "untranslated": max((s[i].untranslated for s in per_seed), default=0),
                    "bleu": _mean(bleu), "chrf": _mean(chrf),
                    "bleu_seeds": bleu, "chrf_seeds": chrf})
    return out


def add_entries(report: dict[str, Any], corpus: Corpus, limit: Optional[TrainLimit],
                results: dict[tuple[str, str], dict[int, dict]]) -> None:
    """``summary[*].extrapolation`` (None without ``--train-max-len``) and the top-level
    ``train_max_len``; ``results``: every row's ``result.json`` per seed, by (split, row)."""
    report["train_max_len"] = limit.to_json() if limit else None
    started = time.monotonic()
    tests = {t.name: t for t in corpus.tests}
    texts: dict[str, tuple[list[str], list[str], list[int]]] = {}
    for row in report["summary"]:
        if limit is None:
            row["extrapolation"] = None
            continue
        test = tests[row["split"]]
        if test.name not in texts:
            texts[test.name] = (read_lines(test.source), read_lines(test.reference),
                                source_lengths(corpus, test.subset))
        row["extrapolation"] = entries(results.get((row["split"], row["encoding"]), {}),
                                       *texts[test.name], corpus, limit.n)
    if limit is not None:
        say(f"report: relative length bins scored in {time.monotonic() - started:.2f}s")


# --- the report --------------------------------------------------------------------------


def bin_label(entry: dict[str, Any]) -> str:
    lo, hi = entry["bin"]
    return f"({lo}, {hi}]" if hi is not None else f"({lo}, inf)"


def intro(report: dict[str, Any]) -> list[tuple]:
    """The paragraphs on the training limit and the variants (none without either)."""
    blocks: list[tuple] = []
    limit = report.get("train_max_len")
    if limit:
        total = limit["kept"] + limit["dropped"]
        blocks.append(("p", f"Trained on the pairs of at most N = {limit['n']} tokens per "
                            "side (`--train-max-len`: subwords with the end of sentence, "
                            "fairseq's count, `--task translation_extrapolation`): "
                            f"{limit['kept']:,} of {total:,} training pairs kept, "
                            f"{limit['dropped']:,} dropped."))
    variants = report.get("variants") or []
    if variants:
        blocks.append(("p", "Inference-time variants, translated from the same checkpoints "
                            "without retraining and tested against the baseline as any row: "
                       + "; ".join(f"`{v['name']}` = `{v['encoding']}` with "
                                   f"`{' '.join(v['flags'])}`" for v in variants) + "."))
    return blocks


def plot_path(pictures: Path, split: str) -> Path:
    return pictures / f"extrapolation-{split}.png"


def reading(report: dict[str, Any]) -> Optional[str]:
    """What a cell of the tables by relative length says, for the report's "How to read"
    (None without ``--train-max-len``)."""
    if not report.get("train_max_len"):
        return None
    n = report["train_max_len"]["n"]
    return (f"Tables by source length relative to N = {n}: each cell is BLEU / chrF of the "
            "sources whose length over N falls in the bin, the mean over seeds (the plot "
            "shades the seeds' range). `(0, 1]`: sources no longer than the training pairs; "
            "beyond 1, positions and distances past N, which no training pair showed the "
            "model. Compare rows within a bin, not bins.")


def few(report: dict[str, Any]) -> bool:
    """Whether a table by relative length has a bin of few sentences."""
    return any(is_few(e["n"]) for r in report["summary"] for e in r.get("extrapolation") or ())


def blocks(report: dict[str, Any], split: str, pictures: Path,
           pointer: Callable[[Sequence[dict[str, Any]]], list[tuple]]) -> list[tuple]:
    """The split's table by relative length, ``pointer(rows)`` (the report's line that
    points to how to read it) and its plot."""
    rows = [r for r in report["summary"] if r["split"] == split and r.get("extrapolation")]
    if not rows or not report.get("train_max_len"):
        return []
    n = report["train_max_len"]["n"]
    first = rows[0]["extrapolation"]

    def cell(e: dict[str, Any]) -> str:
        if e["bleu"] is None:
            return "-" + (f" ({e['untranslated']} untranslated)" if e["untranslated"] else "")
        return (f"{e['bleu']:.2f} / {e['chrf']:.2f}"
                + (f" ({e['untranslated']} untranslated)" if e["untranslated"] else ""))

    out: list[tuple] = [
        ("h3", f"By source length relative to the training limit N = {n} (subword tokens "
               "with </s>)"),
        ("table", ["encoding"] + [column(bin_label(e), e["n"]) for e in first],
         [[convergence.marked(f"`{r['encoding']}`", r.get("still_improving"))]
          + [cell(e) for e in r["extrapolation"]] for r in rows]),
        *pointer(rows),
    ]
    path = plot_path(pictures, split)
    if path.exists():
        out.append(("img", path, f"{split}: BLEU and chrF by source length over N"))
    return out


def draw(report: dict[str, Any], pictures: Path) -> list[Path]:
    """One PNG per test split (:func:`plot_path`): BLEU (left) and chrF (right) against
    the relative bins, a line per row (its mean over seeds, the seeds' min-max shaded; a
    variant dashed in its encoding's colour)."""
    if not report.get("train_max_len"):
        return []
    started = time.monotonic()
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    encodings = list(report["encodings"])
    variant_of = {v["name"]: v["encoding"] for v in report.get("variants") or []}
    n = report["train_max_len"]["n"]
    paths = []
    for split in dict.fromkeys(r["split"] for r in report["summary"]):
        rows = [r for r in report["summary"] if r["split"] == split and r.get("extrapolation")]
        if not rows:
            continue
        first = rows[0]["extrapolation"]
        x = list(range(len(first)))
        few = [i for i in x if is_few(first[i]["n"])]
        sure = [i for i in x if i not in few]
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), dpi=100)
        for ax, metric in zip(axes, ("bleu", "chrf")):
            for i in few:
                ax.axvspan(i - 0.5, i + 0.5, color="0.85", zorder=0, linewidth=0)
            for row in rows:
                name = row["encoding"]
                encoding = variant_of.get(name, name)
                colour = colours[encodings.index(encoding) % len(colours)
                                 if encoding in encodings else 0]
                means = [math.nan if e[metric] is None else e[metric]
                         for e in row["extrapolation"]]
                variant = name in variant_of
                ax.plot(x, means, marker="s" if variant else "o", color=colour, label=name,
                        linestyle="--" if variant else "-", markevery=sure)
                ax.plot(few, [means[i] for i in few], "s" if variant else "o", color=colour,
                        markerfacecolor="white")
                seeds = [[v for v in e[f"{metric}_seeds"] if v is not None]
                         for e in row["extrapolation"]]
                if any(len(s) > 1 for s in seeds):
                    ax.fill_between(x, [min(s) if s else math.nan for s in seeds],
                                    [max(s) if s else math.nan for s in seeds],
                                    color=colour, alpha=0.15, linewidth=0)
            ax.set_xticks(x, [f"{bin_label(e)}\nn={e['n']}" + (" few" if is_few(e["n"]) else "")
                              for e in first], fontsize=8)
            ax.set_xlabel(f"source length / N (N = {n} subword tokens with </s>)")
            ax.set_ylabel(f"{split} {'BLEU' if metric == 'bleu' else 'chrF'}")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{split}: by source length over the training limit (mean over seeds, "
                     "shaded: the seeds' range)" + (f"\nhollow on grey: a bin of fewer than "
                                                    f"{FEW} sentences (few), a rough score"
                                                    if few else ""))
        fig.tight_layout()
        path = plot_path(pictures, split)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    say(f"report: extrapolation plots drawn in {time.monotonic() - started:.2f}s")
    return paths
