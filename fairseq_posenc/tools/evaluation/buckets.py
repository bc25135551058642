"""BLEU and chrF by source-sentence length: where in the test set two encodings differ.

Bins are ``(low, high]`` pairs of source lengths, contiguous and starting at 0. The default
is AT5's Table 5 (Wu et al. 2021, :data:`AT5_BINS`): ``(0, 20], (20, 40], ..., (100, 120]``
source words; a sentence longer than the last finite bin falls in an overflow bin ``(120,
inf)``, which is shown only when some sentence does. :func:`bins_from_edges` makes other
bins from their upper edges (``posenc-score --bins``); those end in an explicit ``(last,
inf)`` bin, always shown. A sentence's length is the number of Moses tokens of its raw
source (sacremoses with the source language, no escaping), i.e. words and punctuation marks
as a Moses-tokenized corpus counts them; an empty source counts in the first bin.

Each bucket is scored as a corpus of its own sentences with the metric of the whole table
(:func:`.scoring.score`), so its BLEU is comparable across systems, not across buckets
(brevity penalty and n-gram statistics are per bucket).

Extrapolation: a sentence the model cannot represent (an absolute encoding with fewer
positions than the source has tokens) is not translated; ``untranslated`` marks it, and
its bucket reports how many such sentences it holds instead of silently scoring fewer.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .scoring import score

#: Source-length bins: ``(low, high]`` pairs, contiguous from 0; only the last ``high`` may
#: be ``math.inf``.
Bins = Sequence[tuple[int, float]]

#: AT5 Table 5's source-length bins, ``(low, high]``: the default of :func:`by_length`.
AT5_BINS: tuple[tuple[int, int], ...] = tuple((lo, lo + 20) for lo in range(0, 120, 20))


def bins_from_edges(edges: Sequence[int]) -> tuple[tuple[int, float], ...]:
    """Bins from their upper edges: ``(5, 10, 30)`` -> ``(0, 5], (5, 10], (10, 30],
    (30, inf)``. The edges are ascending positive whole numbers of source tokens."""
    given, edges = list(edges), []
    if not given:
        raise ValueError("no bin edges: give at least one upper edge, e.g. 5 10 15 20 30")
    for edge in given:
        try:
            whole = operator.index(edge)  # ints, numpy ints; not floats
        except TypeError:
            whole = 0
        if isinstance(edge, bool) or whole < 1:
            raise ValueError(f"bin edge {edge!r} is not a positive whole number of source "
                             "tokens; give ascending positive integers, e.g. 5 10 15 20 30")
        edges.append(whole)
    for low, high in zip(edges, edges[1:]):
        if high <= low:
            raise ValueError(f"bin edges must ascend: {high} follows {low} in "
                             f"{' '.join(map(str, edges))}; give e.g. 5 10 15 20 30")
    lows = [0, *edges]
    return tuple(zip(lows, [*edges, math.inf]))


def check_bins(bins: Bins) -> None:
    """``bins`` as :data:`Bins` says, or a ``ValueError`` naming what is wrong."""
    if not bins:
        raise ValueError("no length bins; give (low, high] pairs such as AT5_BINS")
    expected_low = 0
    for i, (low, high) in enumerate(bins):
        if low != expected_low or not high > low:
            raise ValueError(f"length bins must be contiguous (low, high] pairs from 0 with "
                             f"high > low: bin {i} is ({low}, {high}] after a bin ending at "
                             f"{expected_low}; make them with bins_from_edges")
        if math.isinf(high) and i != len(bins) - 1:
            raise ValueError(f"only the last length bin can be open-ended: bin {i} is "
                             f"({low}, inf)")
        expected_low = high


def source_lengths(sources: Sequence[str], lang: str) -> list[int]:
    """Moses tokens per raw source sentence."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [len(tok.tokenize(s, escape=False)) for s in sources]


def bin_label(low: int, high: float) -> str:
    return f"({low}, {'inf' if math.isinf(high) else int(high)}]".replace("inf]", "inf)")


def bin_index(length: int, bins: Bins) -> int:
    """Index of ``length``'s bin; ``len(bins)`` for a length beyond the last."""
    for i, (_low, high) in enumerate(bins):
        if length <= high:
            return i
    return len(bins)


@dataclass(frozen=True)
class BucketScore:
    label: str  # e.g. "(20, 40]"
    sentences: int  # test sentences whose source length falls in the bin
    untranslated: int  # of those, not translated (longer than the model can represent)
    bleu: Optional[float]  # None when the bucket has no translated sentence
    chrf: Optional[float]


def by_length(sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str], metric: str,
              src_lang: str, tgt_lang: str, *, bins: Bins = AT5_BINS,
              untranslated: Optional[Sequence[bool]] = None,
              lengths: Optional[Sequence[int]] = None) -> list[BucketScore]:
    """Per bin of source length (``bins``, AT5's by default; see the module docstring):
    sentence count and the BLEU and chrF of its translated sentences. ``lengths``
    overrides :func:`source_lengths` (e.g. subword counts)."""
    if not len(sources) == len(hyps) == len(refs):
        raise ValueError(f"{len(sources)} sources, {len(hyps)} hypotheses and {len(refs)} "
                         "references: scoring by length needs one of each per sentence")
    check_bins(bins)
    lengths = source_lengths(sources, src_lang) if lengths is None else list(lengths)
    skipped = list(untranslated) if untranslated is not None else [False] * len(sources)
    members: list[list[int]] = [[] for _ in range(len(bins) + 1)]
    for i, n in enumerate(lengths):
        members[bin_index(n, bins)].append(i)
    edges = [*bins, (bins[-1][1], math.inf)]
    out = []
    for index, ((low, high), ids) in enumerate(zip(edges, members)):
        if index == len(bins) and not ids:
            continue  # the overflow bin beyond the last given one only when used
        kept = [i for i in ids if not skipped[i]]
        scored = score([hyps[i] for i in kept], [refs[i] for i in kept], metric,
                       tgt_lang) if kept else None
        out.append(BucketScore(bin_label(low, high), len(ids), len(ids) - len(kept),
                               scored.bleu if scored else None,
                               scored.chrf if scored else None))
    return out


def _cell(bucket: BucketScore) -> str:
    if bucket.bleu is None:
        return "-" if not bucket.untranslated else f"- ({bucket.untranslated} untranslated)"
    cell = f"{bucket.bleu:.2f} / {bucket.chrf:.2f}"
    return cell + (f" ({bucket.untranslated} untranslated)" if bucket.untranslated else "")


def check_labels(rows: Mapping[str, Sequence[BucketScore]], bins: Optional[Bins]) -> None:
    """With ``bins``: every row was scored by :func:`by_length` with those bins (its
    labels are theirs, plus the overflow bin when used)."""
    if bins is None:
        return
    check_bins(bins)
    labels = [bin_label(low, high) for low, high in bins]
    overflow = bin_label(bins[-1][1], math.inf)
    for name, buckets in rows.items():
        got = [b.label for b in buckets]
        if got != labels and got != [*labels, overflow]:
            raise ValueError(f"{name} was scored by source length with the bins "
                             f"{', '.join(got)}, not the given {', '.join(labels)}; score "
                             "every system with the same bins")


def bucket_table(rows: Mapping[str, Sequence[BucketScore]], *,
                 bins: Optional[Bins] = None) -> str:
    """Markdown: one row per system, one column per bin (its sentence count in the header),
    each cell ``BLEU / chrF``. Every system must have been scored on the same test set (and,
    when ``bins`` is given, with those bins). The columns are the buckets' own labels, so
    any bins render."""
    if not rows:
        return ""
    check_labels(rows, bins)
    first = next(iter(rows.values()))
    for name, buckets in rows.items():
        if [(b.label, b.sentences) for b in buckets] != [(b.label, b.sentences) for b in first]:
            raise ValueError(f"{name} was scored on other sentences than the first row; "
                             "length buckets compare systems on one test set")
    head = "| source length | " + " | ".join(f"{b.label} n={b.sentences}" for b in first) + " |"
    lines = [head, "|---|" + "---|" * len(first)]
    lines += [f"| {name} | " + " | ".join(_cell(b) for b in buckets) + " |"
              for name, buckets in rows.items()]
    return "\n".join(lines)


def plot_buckets(panels: Mapping[str, Mapping[str, Sequence[BucketScore]]], path: Path,
                 title: str, *, bins: Optional[Bins] = None) -> Path:
    """One figure, PNG at ``path``: per panel (e.g. a test set; its name labels the row)
    BLEU (left) and chrF (right) by bucket, one line per system. The x axis is the buckets'
    own labels; ``bins``, when given, is checked as in :func:`bucket_table`."""
    for rows in panels.values():
        check_labels(rows, bins)
    import logging

    # fairseq's import leaves the root logger at DEBUG: keep matplotlib's start-up quiet
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)), dpi=100,
                             squeeze=False)
    for (panel, rows), pair in zip(panels.items(), axes):
        first = next(iter(rows.values()))
        x = list(range(len(first)))
        ticks = [f"{b.label}\nn={b.sentences}" for b in first]
        for ax, name in zip(pair, ("BLEU", "chrF")):
            for system, buckets in rows.items():
                ys = [getattr(b, name.lower()) for b in buckets]
                ax.plot(x, [math.nan if y is None else y for y in ys], marker="o",
                        label=system)
            ax.set_xticks(x, ticks, fontsize=8)
            ax.set_xlabel("source length (Moses tokens)")
            ax.set_ylabel(f"{panel} {name}".strip())
            ax.grid(alpha=0.3)
        pair[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
