"""BLEU and chrF by sentence length: where in the test set two systems differ.

Sentences are binned by the length of their source or of their reference (:mod:`.bins`: the
test set's own quantile bins by default, bins by hand, or AT5's). The drop on long sentences
follows the output's length as much as the input's (Varis and Bojar 2021, "Sequence Length
is a Domain: Length-based Overfitting in Transformer Models", EMNLP), hence both. Bins given
by hand end in an open-ended bin, always shown; with bins whose last is finite (AT5's), a
sentence longer than the last falls in an overflow bin ``(last, inf)``, shown only when some
sentence does.

Each bucket is scored as a corpus of its own sentences with the metric of the whole table
(:func:`.scoring.score`), so its BLEU is comparable across systems, not across buckets
(brevity penalty and n-gram statistics are per bucket). A bucket of fewer than
:data:`~.bins.FEW` sentences is marked few (:attr:`BucketScore.few`): the table says so in its
header, the plot draws it hollow on a shaded band. Buckets carry no significance test:
test a difference on the whole test set (:mod:`.significance`).

Extrapolation: a sentence the model cannot represent (an absolute encoding with fewer
positions than the source has tokens) is not translated; ``untranslated`` marks it, and
its bucket reports how many such sentences it holds instead of silently scoring fewer.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .bins import FEW, Bins, bin_index, bin_label, check_bins, is_few, moses_lengths, quantile_bins
from .scoring import score

#: Moses tokens per raw source sentence (the sources' language).
source_lengths = moses_lengths

#: What a table by reference length says under bins too short for BLEU's 4-grams
#: (:func:`short`).
SHORT_NOTE = ("BLEU counts matching 4-grams, which references of 3 tokens or fewer lack: in a "
              "bin of them BLEU is 0 or near it whatever the translation; compare chrF there")

#: What a table or plot says of a bucket marked few.
FEW_NOTE = (f"`few`: fewer than {FEW} sentences in the bin, too few for its score to weigh as "
            "much as the others'")


@dataclass(frozen=True)
class BucketScore:
    label: str  # e.g. "(20, 40]"
    sentences: int  # test sentences whose length falls in the bin
    untranslated: int  # of those, not translated (longer than the model can represent)
    bleu: Optional[float]  # None when the bucket has no translated sentence
    chrf: Optional[float]

    @property
    def few(self) -> bool:
        """Fewer than :data:`~.bins.FEW` sentences: a rough score, marked as such."""
        return is_few(self.sentences)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "few": self.few}


def by_length(sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str], metric: str,
              src_lang: str, tgt_lang: str, *, bins: Optional[Bins] = None,
              untranslated: Optional[Sequence[bool]] = None,
              lengths: Optional[Sequence[int]] = None) -> list[BucketScore]:
    """Per bin of length (see the module docstring): sentence count and the BLEU and chrF of
    its translated sentences. ``lengths``: each sentence's length, the sources' Moses tokens
    by default (:func:`source_lengths`; the references' for bins by reference length,
    subword counts for bins relative to a training limit); ``bins``: the test set's own
    (:func:`.bins.quantile_bins` of ``lengths``) by default."""
    if not len(sources) == len(hyps) == len(refs):
        raise ValueError(f"{len(sources)} sources, {len(hyps)} hypotheses and {len(refs)} "
                         "references: scoring by length needs one of each per sentence")
    if bins is not None:
        check_bins(bins)
    lengths = source_lengths(sources, src_lang) if lengths is None else list(lengths)
    if len(lengths) != len(refs):
        raise ValueError(f"{len(lengths)} lengths for {len(refs)} sentences: give one length "
                         "per sentence")
    bins = quantile_bins(lengths) if bins is None else bins
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


def short(bins: Bins) -> bool:
    """Whether a bin holds only sentences of 3 tokens or fewer (:data:`SHORT_NOTE`); a bin's
    ``high`` may be None for the open-ended last (``report.json``'s edges)."""
    return any(high is not None and high <= 3 for _low, high in bins)


def _cell(bucket: BucketScore) -> str:
    if bucket.bleu is None:
        return "-" if not bucket.untranslated else f"- ({bucket.untranslated} untranslated)"
    cell = f"{bucket.bleu:.2f} / {bucket.chrf:.2f}"
    return cell + (f" ({bucket.untranslated} untranslated)" if bucket.untranslated else "")


def column(label: str, sentences: int) -> str:
    """A bin's column header: its label and count, ``few`` when it is."""
    return f"{label} n={sentences}" + (" few" if is_few(sentences) else "")


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
            raise ValueError(f"{name} was scored by length with the bins "
                             f"{', '.join(got)}, not the given {', '.join(labels)}; score "
                             "every system with the same bins")


def bucket_table(rows: Mapping[str, Sequence[BucketScore]], *,
                 bins: Optional[Bins] = None, by: str = "source length",
                 notes: Sequence[str] = ()) -> str:
    """Markdown: one row per system, one column per bin (its sentence count in the header,
    ``few`` when few, and a line under the table saying what that means), each cell
    ``BLEU / chrF``. Every system must have been scored on the same test set (and, when
    ``bins`` is given, with those bins). The columns are the buckets' own labels, so any
    bins render; ``by`` names what they bin, ``notes`` go under the table too."""
    if not rows:
        return ""
    check_labels(rows, bins)
    first = next(iter(rows.values()))
    for name, buckets in rows.items():
        if [(b.label, b.sentences) for b in buckets] != [(b.label, b.sentences) for b in first]:
            raise ValueError(f"{name} was scored on other sentences than the first row; "
                             "length buckets compare systems on one test set")
    head = f"| {by} | " + " | ".join(column(b.label, b.sentences) for b in first) + " |"
    lines = [head, "|---|" + "---|" * len(first)]
    lines += [f"| {name} | " + " | ".join(_cell(b) for b in buckets) + " |"
              for name, buckets in rows.items()]
    notes = ([FEW_NOTE] if any(b.few for b in first) else []) + list(notes)
    if notes:
        lines += ["", ". ".join(notes) + "."]
    return "\n".join(lines)


def plot_buckets(panels: Mapping[str, Mapping[str, Sequence[BucketScore]]], path: Path,
                 title: str, *, bins: Optional[Bins] = None,
                 axis: Optional[Mapping[str, str]] = None) -> Path:
    """One figure, PNG at ``path``: per panel (e.g. a test set; its name titles the row)
    BLEU (left) and chrF (right) by bucket, one line per system. The x axis is the buckets'
    own labels, titled ``axis[panel]`` (default: source length in Moses tokens); a bucket
    marked few is drawn hollow on a shaded band, its label saying ``few``. ``bins``, when
    given, is checked as in :func:`bucket_table`."""
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
    any_few = False
    for (panel, rows), pair in zip(panels.items(), axes):
        first = next(iter(rows.values()))
        x = list(range(len(first)))
        few = [i for i, b in enumerate(first) if b.few]
        any_few = any_few or bool(few)
        ticks = [f"{b.label}\nn={b.sentences}" + (" few" if b.few else "") for b in first]
        for ax, name in zip(pair, ("BLEU", "chrF")):
            for i in few:
                ax.axvspan(i - 0.5, i + 0.5, color="0.85", zorder=0, linewidth=0)
            for system, buckets in rows.items():
                ys = [getattr(b, name.lower()) for b in buckets]
                ys = [math.nan if y is None else y for y in ys]
                line, = ax.plot(x, ys, label=system)
                ax.plot([i for i in x if i not in few], [ys[i] for i in x if i not in few],
                        "o", color=line.get_color())
                ax.plot(few, [ys[i] for i in few], "o", markerfacecolor="white",
                        color=line.get_color())
            ax.set_xticks(x, ticks, fontsize=8)
            ax.set_xlabel((axis or {}).get(panel, "source length (Moses tokens)"))
            ax.set_ylabel(name)
            ax.set_title(f"{panel}: {name}" if panel else name, fontsize=10)
            ax.grid(alpha=0.3)
        pair[0].legend(fontsize=8)
    fig.suptitle(title + (f"\nhollow on grey: a bin of fewer than {FEW} sentences (few), a "
                          "rough score" if any_few else ""))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
