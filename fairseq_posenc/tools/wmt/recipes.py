"""The papers' translation tables and the settings that reproduce them (data, no logic).

Each paper's table is a set of rows (position encodings, with the model flags that make
our encoding match the paper's setting) and columns (a dataset, a direction, a test set),
plus the training, decoding and scoring setup the paper states. Where a paper is silent,
the choice is marked ``# not stated:`` with the reason for the value taken.

Paper numbers are the papers' published ones; docs/conventions.md ("Reference numbers")
says where each comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

# the papers' decoding, every translation's default: beam 10, alpha 0.6
from ..experiment.translate import BEAM, LENPEN  # noqa: F401


@dataclass(frozen=True)
class Column:
    label: str  # as printed in the paper's table
    dataset: str  # examples/wmt/prepare.py dataset name
    src: str
    tgt: str
    testset: str  # newstest name, looked up in the dataset's manifest
    # the training corpora the paper used (prepare.py names), where known; the table
    # prints them beside those of our run
    paper_corpora: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    label: str  # the paper's name of the model
    encoding: str  # --pos-encoding
    flags: tuple[str, ...] = ()  # model flags that reproduce the paper's setting
    paper: tuple[float, ...] = ()  # the paper's BLEU, one per column


@dataclass(frozen=True)
class Paper:
    key: str
    title: str  # table caption
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    # "cased" (sacreBLEU's default) | "uncased" (t2t-bleu: -tok intl -lc) | "tokenized"
    # (multi-bleu.perl over Moses tokens); see reproduce.score
    metric: str
    max_update: int
    batch_tokens: int  # tokens per update (all GPUs, all accumulation steps)
    model_flags: tuple[str, ...] = ()
    average_last: int = 0  # average this many last checkpoints (0: see ``checkpoint``)
    # which checkpoint is evaluated when none are averaged: "last", or "best" (fairseq's
    # checkpoint_best.pt, chosen on the dataset's validation set)
    checkpoint: str = "last"
    # the optimization settings (fairseq-train flags)
    train_flags: tuple[str, ...] = ()
    # the other defensible reading of an unstated training length: (max_update,
    # average_last, why), taken with reproduce.py --alternative-schedule
    alternative_schedule: Optional[tuple[int, int, str]] = None
    # every setting that still differs from the paper, and why (printed under the table)
    differences: tuple[str, ...] = field(default=())
    # how finished beam hypotheses are normalized: "gnmt", ((5 + L) / 6)^alpha, as
    # tensor2tensor and THUMT (fairseq-generate --task translation_gnmt), or "fairseq", L^alpha
    length_penalty: str = "gnmt"
    # the row every other row is tested against (paired bootstrap); "" for the first row
    baseline: str = ""
    # train on sentence pairs of at most this many subword tokens per side (fairseq's count,
    # end of sentence included): --task translation_extrapolation --train-max-len N.
    # Validation and test sets are not filtered.
    train_max_len: Optional[int] = None

    @property
    def baseline_row(self) -> Row:
        if not self.baseline:
            return self.rows[0]
        return next(r for r in self.rows if r.label == self.baseline)


# Transformer base as Vaswani et al. 2017's paper gives it: Adam (0.9, 0.98, eps 1e-9), the
# "noam" schedule (inverse_sqrt with 4000 warmup updates; lr 7e-4
# is its peak, d_model^-0.5 * 4000^-0.5), label smoothing 0.1, dropout 0.1, one joined BPE
# vocabulary with all embeddings shared.
BASE_TRAIN_FLAGS: tuple[str, ...] = (
    "--share-all-embeddings",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9",
    "--lr", "7e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
    "--warmup-init-lr", "1e-7",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--dropout", "0.1", "--weight-decay", "0.0",
)

# tensor2tensor's transformer_base (v3, its default when Chen 2021a and DIET ran it):
# layer_preprocess "n" (pre-norm), learning_rate_schedule "constant*linear_warmup*
# rsqrt_decay*rsqrt_hidden_size" with constant 2.0 and 8000 warmup steps -- exactly fairseq's
# inverse_sqrt with peak 2.0 * 512^-0.5 * 8000^-0.5 = 9.88e-4 at update 8000 --, Adam
# (0.9, 0.997, eps 1e-9), attention and ReLU dropout 0.1 beside the residual dropout 0.1,
# label smoothing 0.1.
TENSOR2TENSOR_BASE_FLAGS: tuple[str, ...] = (
    "--encoder-normalize-before", "--decoder-normalize-before",
    "--share-all-embeddings",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.997)", "--adam-eps", "1e-9",
    "--lr", "9.88e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "8000",
    "--warmup-init-lr", "1e-7",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--dropout", "0.1", "--attention-dropout", "0.1", "--activation-dropout", "0.1",
    "--weight-decay", "0.0",
)
#: What stays different in a tensor2tensor paper's recipe.
TENSOR2TENSOR_DIFFERENCES = (
    "subwords: tensor2tensor's SubwordTextEncoder (32k) on raw text; here subword-nmt BPE over "
    "Moses tokens marked with joiners, or prepare.py --bpe sentencepiece (raw text, closer)",
    "maximum length: tensor2tensor's max_length 256 skips longer training examples; not set "
    "here (fairseq's --max-source/target-positions 256 would also refuse longer test "
    "sentences): training pairs of 257-1024 subwords are kept",
    "beam search: tensor2tensor also ranks the alive hypotheses of each step with the length "
    "penalty; fairseq ranks them by their unnormalized score (finished ones by GNMT's penalty)",
)


CHEN2021A = Paper(
    key="chen2021a",
    title="Chen et al. 2021a ('Demystifying ...'), Table 6: newstest2015, uncased BLEU",
    columns=(
        Column("EN-DE", "wmt15_en_de", "en", "de", "newstest2015"),
        Column("DE-EN", "wmt15_en_de", "de", "en", "newstest2015"),
        # tensor2tensor's translate_encs_wmt32k: all of CzEng 1.6's training files (no 1.7
        # block list), NC v13, Common Crawl, Europarl v7 (prepare.py --czeng-release 1.6)
        Column("EN-CS", "wmt18_en_cs", "en", "cs", "newstest2015",
               ("europarl_v7", "commoncrawl", "nc_v13", "czeng_1.6")),
    ),
    rows=(
        Row("Vaswani (input)", "sinusoidal", (), (28.33, 31.82, 21.15)),  # the baseline
        # tensor2tensor's transformer_relative (the implementation the paper ran) clips at 20
        Row("Shaw", "shaw", ("--shaw-clip", "20"), (29.23, 32.37, 21.47)),
        Row("Raffel (T5)", "t5", (), (29.17, 31.81, 21.31)),
        Row("REL-SCALAR", "diet_rel", (), (29.22, 31.91, 21.71)),
    ),
    metric="uncased",
    # not stated: the paper "follows Vaswani et al. closely" with tensor2tensor, whose base
    # model trained 100k steps on ~25k source + ~25k target tokens per batch and averaged
    # the last 5 checkpoints.
    max_update=100_000,
    batch_tokens=25_000,
    average_last=5,
    train_flags=TENSOR2TENSOR_BASE_FLAGS,
    alternative_schedule=(
        250_000, 0, "DIET, by the same authors with the same wording, states 250k steps and "
        "no averaging"),
    differences=(
        "training length: not stated; the recipe reads 'follows Vaswani et al. closely' as "
        "their base model's 100k updates and average of the last 5 checkpoints; "
        "--alternative-schedule takes DIET's reading (250k, no averaging)",
        *TENSOR2TENSOR_DIFFERENCES,
    ),
)

DIET = Paper(
    key="diet",
    title="Chen et al. 2021b (DIET), Table 4: newstest2018, SacreBLEU (default, cased)",
    # "WMT18 ((Europarl v7, Common Crawl corpus and News Commentary v13)" (appendix)
    columns=tuple(Column(label, dataset, src, tgt, "newstest2018",
                         ("europarl_v7", "commoncrawl", "nc_v13"))
                  for label, dataset, src, tgt in (
                      ("EN-DE", "wmt18_en_de", "en", "de"), ("DE-EN", "wmt18_en_de", "de", "en"),
                      ("EN-CS", "wmt18_en_cs", "en", "cs"), ("CS-EN", "wmt18_en_cs", "cs", "en"))),
    rows=(
        Row("Vaswani", "sinusoidal", (), (39.00, 38.42, 18.55, 22.93)),
        Row("Shaw", "shaw", ("--shaw-clip", "20"), (40.10, 38.90, 18.74, 23.89)),
        Row("DIET-REL", "diet_rel", (), (39.47, 38.49, 18.68, 23.93)),
    ),
    metric="cased",
    max_update=250_000,  # "train for 250k steps" (appendix, Translate)
    # not stated: Vaswani et al.'s batch of ~25k tokens per side; no averaging is mentioned
    batch_tokens=25_000,
    train_flags=TENSOR2TENSOR_BASE_FLAGS,
    differences=(
        "batch: not stated; Vaswani et al.'s 25k tokens per update",
        *TENSOR2TENSOR_DIFFERENCES,
    ),
)

AT5 = Paper(
    key="at5",
    title="Wu et al. 2021 (AT5), Table 6: WMT17 en-de, multi-BLEU (tokenized)",
    columns=tuple(Column(year, "wmt17_en_de", "en", "de", f"newstest{year}")
                  for year in ("2014", "2015", "2016", "2017")),
    rows=(
        # "B_max and M for T5 are 64 and 128": 64 buckets, max distance 128
        Row("T5-NoB", "t5_nob", (), (28.24, 30.07, 33.73, 28.06)),
        Row("T5", "t5", ("--t5-num-buckets", "64", "--t5-max-distance", "128",
                         "--pos-layers", "first"), (28.15, 30.05, 33.64, 28.00)),
        Row("AT5-NoB", "at5_nob", (), (27.91, 29.86, 33.58, 28.00)),
        Row("AT5", "at5", (), (28.34, 30.18, 34.26, 28.21)),
    ),
    metric="tokenized",
    baseline="T5",  # "AT5 consistently performs better than T5": the paper's comparison
    # "pre-norm residual unit", "maximum sequence length for encoder and decoder are both
    # 256", "batch size is 25000"; the bias is in the first layer only (--pos-layers
    # defaults to first for t5_nob, at5, at5_nob; set explicitly for t5 above).
    model_flags=("--encoder-normalize-before", "--decoder-normalize-before",
                 "--max-source-positions", "256", "--max-target-positions", "256"),
    # not stated: training length; Vaswani et al.'s base setting (100k updates)
    max_update=100_000,
    batch_tokens=25_000,
    # "newstest2014 dataset as the validation dataset": the checkpoint chosen on it. Not
    # stated: by what; fairseq's default, the validation loss.
    checkpoint="best",
    # AT5 ran THUMT; beyond pre-norm, length 256, batch 25000 and label smoothing 0.1 the
    # paper states no optimization setting
    train_flags=BASE_TRAIN_FLAGS,
    differences=(
        "learning rate, warmup, Adam, dropout: not stated (THUMT); Vaswani et al.'s base "
        "(7e-4, 4000 warmup, Adam 0.9/0.98, dropout 0.1)",
        "training length: not stated; Vaswani et al.'s base, 100k updates",
        "checkpoint: the best on newstest2014 by validation loss (the criterion is not stated)",
        "beam and length penalty: not stated; beam 10 and THUMT's GNMT penalty with alpha 0.6",
        "cleaning: Table 5's 5,850,267 pairs of at most 120 tokens; the unit and side are not "
        "stated (prepare.py prints our count beside it)",
    ),
)

#: Not a paper's table: where relative and absolute encodings part ways. Every model trains
#: on WMT17 en-de pairs of at most 50 subword tokens per side (about 38 words) and is tested
#: on all of newstest2017, scored by source-length bucket: the buckets beyond (20, 40] are
#: longer than anything seen in training. An absolute table sized to the training length
#: ("DIET-ABS, 64 positions") cannot represent longer sources; the table counts them.
EXTRAPOLATION = Paper(
    key="extrapolation",
    title="Length extrapolation: WMT17 en-de trained on pairs of at most 50 subwords, "
          "newstest2017 by source length, SacreBLEU (default, cased)",
    columns=(Column("2017", "wmt17_en_de", "en", "de", "newstest2017"),),
    rows=(
        Row("Vaswani", "sinusoidal"),
        Row("learned", "learned"),
        Row("T5", "t5"),
        Row("DIET-REL", "diet_rel"),
        Row("DIET-ABS", "diet_abs"),
        Row("DIET-ABS, 64 positions", "diet_abs", ("--diet-abs-max-len", "64")),
        Row("ALiBi", "alibi"),
        Row("RoPE", "rope"),
    ),
    metric="cased",
    train_max_len=50,
    max_update=100_000,  # Vaswani et al.'s base
    batch_tokens=25_000,
    train_flags=BASE_TRAIN_FLAGS,
    length_penalty="fairseq",
    differences=(
        "no paper: Transformer base (Vaswani et al.'s settings, 100k updates, last "
        "checkpoint) on the AT5 recipe's prepared WMT17 en-de data",
    ),
)

PAPERS: dict[str, Paper] = {p.key: p for p in (CHEN2021A, DIET, AT5, EXTRAPOLATION)}
