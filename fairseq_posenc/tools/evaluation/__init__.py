"""Scoring translations the way a reader can trust: the papers' BLEU, chrF beside it,
sacreBLEU's paired bootstrap against a baseline, and scores by source length.

* :mod:`.scoring` -- corpus BLEU as each paper reports it (cased, uncased with international
  tokenization, or tokenized) and chrF;
* :mod:`.significance` -- sacreBLEU's own paired bootstrap resampling (1000 resamples);
* :mod:`.buckets` -- BLEU and chrF by source-length bin (AT5's Table 5 bins,
  :data:`AT5_BINS`, or any others, :func:`bins_from_edges`), as a Markdown table and one
  plot;
* :mod:`.cli` -- ``posenc-score``, all of the above for files on disk.
"""

from .buckets import (
    AT5_BINS, BucketScore, Bins, bins_from_edges, bucket_table, by_length, plot_buckets,
    source_lengths)
from .scoring import METRICS, Scored, bleu, chrf, score
from .significance import (
    ALPHA, N_RESAMPLES, Comparison, bleu_bootstrap, chrf_bootstrap, paired_bootstrap)

__all__ = [
    "ALPHA", "AT5_BINS", "Bins", "BucketScore", "Comparison", "METRICS", "N_RESAMPLES",
    "Scored", "bins_from_edges", "bleu", "bleu_bootstrap", "bucket_table", "by_length",
    "chrf", "chrf_bootstrap", "paired_bootstrap", "plot_buckets", "score", "source_lengths",
]
