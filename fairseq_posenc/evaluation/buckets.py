"""BLEU and chrF by source-sentence length: where in the test set two encodings differ.

Bins are AT5's Table 5 (Wu et al. 2021): ``(0, 20], (20, 40], ..., (100, 120]`` source
words; a sentence of more than 120 words falls in ``(120, inf)``, which is shown only when
some sentence does. A sentence's length is the number of Moses tokens of its raw source
(sacremoses with the source language, no escaping), i.e. words and punctuation marks as a
Moses-tokenized corpus counts them; an empty source counts in the first bin.

Each bucket is scored as a corpus of its own sentences with the metric of the whole table
(:func:`.scoring.score`), so its BLEU is comparable across systems, not across buckets
(brevity penalty and n-gram statistics are per bucket).

Extrapolation: a sentence the model cannot represent (an absolute encoding with fewer
positions than the source has tokens) is not translated; ``untranslated`` marks it, and
its bucket reports how many such sentences it holds instead of silently scoring fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .scoring import score

#: AT5 Table 5's source-length bins, ``(low, high]``.
AT5_BINS: tuple[tuple[int, int], ...] = tuple((lo, lo + 20) for lo in range(0, 120, 20))


def source_lengths(sources: Sequence[str], lang: str) -> list[int]:
    """Moses tokens per raw source sentence."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [len(tok.tokenize(s, escape=False)) for s in sources]


def bin_label(low: int, high: float) -> str:
    return f"({low}, {'inf' if math.isinf(high) else int(high)}]".replace("inf]", "inf)")


def bin_index(length: int, bins: Sequence[tuple[int, int]]) -> int:
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
              src_lang: str, tgt_lang: str,
              bins: Sequence[tuple[int, int]] = AT5_BINS,
              untranslated: Optional[Sequence[bool]] = None,
              lengths: Optional[Sequence[int]] = None) -> list[BucketScore]:
    """Per bin of source length: sentence count and the BLEU and chrF of its translated
    sentences. ``lengths`` overrides :func:`source_lengths` (e.g. subword counts)."""
    if not len(sources) == len(hyps) == len(refs):
        raise ValueError(f"{len(sources)} sources, {len(hyps)} hypotheses and {len(refs)} "
                         "references: scoring by length needs one of each per sentence")
    lengths = source_lengths(sources, src_lang) if lengths is None else list(lengths)
    skipped = list(untranslated) if untranslated is not None else [False] * len(sources)
    members: list[list[int]] = [[] for _ in range(len(bins) + 1)]
    for i, n in enumerate(lengths):
        members[bin_index(n, bins)].append(i)
    edges = [*bins, (bins[-1][1], math.inf)]
    out = []
    for (low, high), ids in zip(edges, members):
        if math.isinf(high) and not ids:
            continue  # the overflow bin only when used
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


def bucket_table(rows: Mapping[str, Sequence[BucketScore]]) -> str:
    """Markdown: one row per system, one column per bin (its sentence count in the header),
    each cell ``BLEU / chrF``. Every system must have been scored on the same test set."""
    if not rows:
        return ""
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
                 title: str) -> Path:
    """One figure, PNG at ``path``: per panel (e.g. a test set; its name labels the row)
    BLEU (left) and chrF (right) by bucket, one line per system."""
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
