"""The report's scores by sentence length: ``summary[*].buckets`` and ``target_buckets``.

Per test split, its sentences are binned by source length and by reference length (Moses
tokens of the raw text, :func:`fairseq_posenc.tools.evaluation.moses_lengths`): by default
in the split's own quantile bins (:func:`fairseq_posenc.tools.evaluation.quantile_bins`), with
``--bins`` in the edges given, for both. The bins come from the split's sources and
references, never from a hypothesis, so every row of the split (encoding, variant, seed) is
scored in the same bins. Per row, each bin's BLEU and chrF is the mean over the row's seeds;
the source bins end with the row ``beyond training``: the sources longer than every training
source in the model's subword tokens. Every row carries its ``sentences`` and ``few``
(fewer than :data:`~fairseq_posenc.tools.evaluation.FEW`); no row carries a significance
test (the split's table has it, over all its sentences).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..evaluation import FEW, Bins, by_length, is_few, moses_lengths, quantile_bins, score
from ..textprep.files import read_lines
from .data import Corpus, TestSplit
from .execute import METRIC

#: The label of the source table's last row.
BEYOND = "beyond training"


@dataclass(frozen=True)
class Side:
    """One way of binning a test split: its bins and each sentence's length."""
    bins: Bins
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class SplitBins:
    source: Side
    target: Side


def of_split(test: TestSplit, corpus: Corpus, given: Optional[Bins]) -> SplitBins:
    """The split's bins by source and by reference length: ``given`` (``--bins``), else
    each from the split's own lengths."""
    sides = []
    for path, lang in ((test.source, corpus.source_lang), (test.reference, corpus.target_lang)):
        lengths = tuple(moses_lengths(read_lines(path), lang))
        bins = given or (quantile_bins(lengths) if lengths else ((0, math.inf),))
        sides.append(Side(bins, lengths))
    return SplitBins(*sides)


def to_json(splits: dict[str, SplitBins], given: Optional[Bins]) -> dict[str, Any]:
    """``report.json``'s ``bins``: the rule and every split's edges, ``[low, high]`` with
    ``high`` null for the open-ended last bin."""
    def edges(bins: Bins) -> list[list[Optional[int]]]:
        return [[low, None if math.isinf(high) else int(high)] for low, high in bins]

    return {"rule": "given" if given else "quantile", "few_below": FEW,
            "splits": {name: {"source": edges(s.source.bins), "target": edges(s.target.bins)}
                       for name, s in splits.items()}}


def _mean(values: Sequence[float]) -> Optional[float]:
    return round(statistics.mean(values), 2) if values else None


def rows(results: dict[int, dict], test: TestSplit, corpus: Corpus, side: Side,
         beyond: Optional[Sequence[int]] = None) -> list[dict[str, Any]]:
    """A row's buckets in ``side``'s bins, the mean over its seeds (``results``: its
    ``result.json`` per seed); with ``beyond`` (sentence ids), the row :data:`BEYOND`
    after them."""
    sources, refs = read_lines(test.source), read_lines(test.reference)
    per_seed = []
    for result in results.values():
        hyps = read_lines(Path(result["hypotheses"]))
        untranslated = set(result["untranslated"])
        buckets = [{**b.to_json(), "bleu": b.bleu, "chrf": b.chrf}
                   for b in by_length(sources, hyps, refs, METRIC, corpus.source_lang,
                                      corpus.target_lang, bins=side.bins, lengths=side.lengths,
                                      untranslated=[i in untranslated for i in range(len(refs))])]
        if beyond:
            kept = [i for i in beyond if i not in untranslated]
            scored = score([hyps[i] for i in kept], [refs[i] for i in kept], METRIC,
                           corpus.target_lang) if kept else None
            buckets.append(dict(label=BEYOND, sentences=len(beyond),
                                untranslated=len(beyond) - len(kept),
                                bleu=round(scored.bleu, 2) if scored else None,
                                chrf=round(scored.chrf, 2) if scored else None,
                                few=is_few(len(beyond))))
        per_seed.append(buckets)
    return [{**seeds[0], **{m: _mean([r[m] for r in seeds if r[m] is not None])
                            for m in ("bleu", "chrf")}}
            for seeds in zip(*per_seed)]
