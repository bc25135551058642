"""Scoring translations the way a reader can trust: the papers' BLEU, chrF beside it,
sacreBLEU's paired bootstrap against a baseline, and scores by sentence length.

* :mod:`.scoring` -- corpus BLEU as each paper reports it (cased, uncased with international
  tokenization, or tokenized) and chrF;
* :mod:`.significance` -- sacreBLEU's own paired bootstrap resampling (1000 resamples);
* :mod:`.bins` -- length bins: the test set's own quantile bins (:func:`quantile_bins`, the
  default), bins by hand (:func:`bins_from_edges`) or AT5's Table 5 bins (:data:`AT5_BINS`);
  a bin of fewer than :data:`FEW` sentences is marked few;
* :mod:`.buckets` -- BLEU and chrF by bin of source or reference length, as a Markdown table
  and one plot;
* :mod:`.cli` -- ``posenc-score``, all of the above for files on disk.
"""

from .bins import (
    AT5_BINS, FEW, Bins, bins_from_edges, is_few, moses_lengths, quantile_bins)
from .buckets import BucketScore, bucket_table, by_length, plot_buckets, source_lengths
from .scoring import METRICS, Scored, bleu, chrf, score
from .significance import (
    ALPHA, N_RESAMPLES, Comparison, bleu_bootstrap, chrf_bootstrap, paired_bootstrap)

__all__ = [
    "ALPHA", "AT5_BINS", "Bins", "BucketScore", "Comparison", "FEW", "METRICS", "N_RESAMPLES",
    "Scored", "bins_from_edges", "bleu", "bleu_bootstrap", "bucket_table", "by_length",
    "chrf", "chrf_bootstrap", "is_few", "moses_lengths", "paired_bootstrap", "plot_buckets",
    "quantile_bins", "score", "source_lengths",
]
