"""Is one system's test score better than the baseline's by more than test-set sampling?

sacreBLEU's own paired bootstrap resampling (Koehn 2004; ``sacrebleu --paired-bs``,
:class:`sacrebleu.significance.PairedTest`) with 1000 resamples and sacreBLEU's fixed seed
(``SACREBLEU_SEED``, default 12345), so a p-value here is the one sacreBLEU's command line
prints for the same files. BLEU is resampled on the text the paper's BLEU reads
(:func:`.scoring.bleu_inputs`), chrF on the detokenized text.

sacreBLEU counts the resamples whose centred difference is strictly larger than the observed
one, so two systems with *equal* scores get the smallest p, ``1 / 1001``: a comparison
with no difference is never marked significant here (:attr:`Comparison.significant`).

The p-value is about the *test set*: the chance that a difference this large comes from
which sentences happened to be in it. It says nothing about training noise; with several
seeds, compare the difference with the seeds' standard deviation too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from sacrebleu.significance import PairedTest

from .scoring import bleu_inputs, bleu_metric, chrf_metric

N_RESAMPLES = 1000
#: p below this is marked significant in tables.
ALPHA = 0.05

#: What ``chrF``, ``p`` and ``*`` mean, and how not to over-read p (``{baseline}``: the
#: baseline row's name).
MEANING = (
    "`chrF` is sacreBLEU's chrF2 on the same hypotheses; `p` is sacreBLEU's "
    f"paired bootstrap ({N_RESAMPLES} resamples) of the row's BLEU against the baseline row "
    "{baseline} on the same test sentences (with several seeds: the largest p over the seed "
    f"pairs), `*` where p < {ALPHA} (never for equal scores). p measures only which "
    "sentences the test set holds: a difference smaller than the seeds' standard deviation "
    "is within training noise, whatever p says -- train --seeds 3 or more before reading one.")
#: :data:`MEANING` as a paragraph of its own, under each paper's table of posenc-reproduce.
READING = "How to read: " + MEANING


@dataclass(frozen=True)
class Comparison:
    """A system against the baseline on one metric."""

    metric: str  # "BLEU" or "chrF"
    baseline: float
    system: float
    p_value: float

    @property
    def delta(self) -> float:
        """The system's score minus the baseline's: positive when the system is better."""
        return self.system - self.baseline

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA and self.system != self.baseline


def _paired_test(baseline: Sequence[str], system: Sequence[str], refs: Sequence[str],
                 name: str, scorer, n_samples: int) -> Comparison:
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # one line per resampling step
    _signatures, scores = PairedTest(
        [("baseline", list(baseline)), ("system", list(system))], {name: scorer},
        [list(refs)], test_type="bs", n_samples=n_samples)()
    [(_, (base, result))] = [(k, v) for k, v in scores.items() if k != "System"]
    return Comparison(name, base.score, result.score, result.p_value)


def _check(baseline: Sequence[str], system: Sequence[str], refs: Sequence[str]) -> None:
    if not len(baseline) == len(system) == len(refs):
        raise ValueError(f"paired bootstrap needs one hypothesis per reference from each "
                         f"system: {len(baseline)} baseline, {len(system)} system, "
                         f"{len(refs)} references")


def bleu_bootstrap(baseline: Sequence[str], system: Sequence[str], refs: Sequence[str],
                   metric: str, lang: str, n_samples: int = N_RESAMPLES) -> Comparison:
    """BLEU of ``system`` against ``baseline`` (detokenized hypotheses of the same test set,
    in the references' order), with its paired-bootstrap p-value."""
    _check(baseline, system, refs)
    base_tok, refs_tok = bleu_inputs(baseline, refs, metric, lang)
    sys_tok, _ = bleu_inputs(system, refs, metric, lang)
    return _paired_test(base_tok, sys_tok, refs_tok, "BLEU", bleu_metric(metric), n_samples)


def chrf_bootstrap(baseline: Sequence[str], system: Sequence[str], refs: Sequence[str],
                   metric: str, n_samples: int = N_RESAMPLES) -> Comparison:
    _check(baseline, system, refs)
    return _paired_test(baseline, system, refs, "chrF", chrf_metric(metric), n_samples)


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], refs: Sequence[str],
                     metric: str, lang: str,
                     n_samples: int = N_RESAMPLES) -> tuple[Comparison, Comparison]:
    """:func:`bleu_bootstrap` and :func:`chrf_bootstrap`."""
    return (bleu_bootstrap(baseline, system, refs, metric, lang, n_samples),
            chrf_bootstrap(baseline, system, refs, metric, n_samples))
