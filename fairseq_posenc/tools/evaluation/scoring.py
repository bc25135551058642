"""Corpus BLEU as each paper reports it, and chrF beside it.

``metric`` names how a paper computed BLEU (see ``fairseq_posenc/tools/wmt/recipes.py``):

* ``"cased"`` -- sacreBLEU's default (13a tokenization, cased): DIET;
* ``"uncased"`` -- tensor2tensor's ``t2t-bleu``: international tokenization, lowercased
  (Chen et al. 2021a);
* ``"tokenized"`` -- ``multi-bleu.perl``: BLEU over Moses tokens of hypothesis and reference,
  with no further tokenization (AT5). The signature gets ``|pretok:sacremoses``.

chrF (Popović 2015, sacreBLEU's ``chrF2``) is computed on the detokenized text in every case
-- it reads characters, so a tokenizer would change nothing but whitespace, which it
ignores -- and lowercased where the paper's BLEU is (``"uncased"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Score

Metric = Literal["cased", "uncased", "tokenized"]
METRICS: tuple[str, ...] = ("cased", "uncased", "tokenized")


def check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"unknown BLEU metric {metric!r}; choose one of {', '.join(METRICS)}")


def bleu_metric(metric: str) -> BLEU:
    """sacreBLEU's BLEU configured as the paper's (inputs from :func:`bleu_inputs`)."""
    check_metric(metric)
    if metric == "tokenized":
        return BLEU(tokenize="none")
    if metric == "uncased":
        return BLEU(lowercase=True, tokenize="intl")
    return BLEU()


def chrf_metric(metric: str) -> CHRF:
    check_metric(metric)
    return CHRF(lowercase=metric == "uncased")


def bleu_inputs(hyps: Sequence[str], refs: Sequence[str], metric: str,
                lang: str) -> tuple[list[str], list[str]]:
    """The text BLEU reads: Moses tokens on both sides for ``"tokenized"``, else as given."""
    if metric != "tokenized":
        return list(hyps), list(refs)
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return ([tok.tokenize(h, escape=False, return_str=True) for h in hyps],
            [tok.tokenize(r, escape=False, return_str=True) for r in refs])


def bleu(hyps: Sequence[str], refs: Sequence[str], metric: str,
         lang: str) -> tuple[Score, str]:
    """Corpus BLEU of detokenized ``hyps`` against ``refs`` (target language ``lang``), and
    its sacreBLEU signature."""
    scorer = bleu_metric(metric)
    h, r = bleu_inputs(hyps, refs, metric, lang)
    result = scorer.corpus_score(h, [r])  # the signature needs the number of references
    signature = str(scorer.get_signature())
    return result, signature + ("|pretok:sacremoses" if metric == "tokenized" else "")


def chrf(hyps: Sequence[str], refs: Sequence[str], metric: str) -> tuple[Score, str]:
    scorer = chrf_metric(metric)
    result = scorer.corpus_score(list(hyps), [list(refs)])
    return result, str(scorer.get_signature())


@dataclass(frozen=True)
class Scored:
    """BLEU and chrF of one system on one test set."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int


def score(hyps: Sequence[str], refs: Sequence[str], metric: str, lang: str) -> Scored:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references: every test "
                         "sentence needs exactly one hypothesis, in the references' order")
    b, b_sig = bleu(hyps, refs, metric, lang)
    c, c_sig = chrf(hyps, refs, metric)
    return Scored(b.score, c.score, b_sig, c_sig, len(refs))
