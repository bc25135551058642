"""Length extrapolation: train on short sentence pairs, test on all, say what cannot be read.

``--task translation_extrapolation --train-max-len N`` is fairseq's ``translation`` whose
*training* split keeps only pairs of at most ``N`` tokens per side (fairseq's count: subword
tokens plus the end of sentence), dropped with fairseq's own size filter, which logs how
many it skipped. The model's ``--max-source/target-positions`` stay as they are, so a
relative encoding -- and an absolute one whose table is longer than ``N`` -- is tested on
longer sentences than it was trained on (Press et al. 2022 train short and test long the
same way). Validation and test sets are not filtered. When translating, the task also takes
``--rope-scaling`` (:mod:`fairseq_posenc.plugin.translation_scaling`), whose YaRN reads
``--train-max-len`` from the checkpoint as the training length.

:func:`length_limits` reads from a checkpoint's model configuration the longest source and
target a model can represent: fairseq's ``--max-source/target-positions`` and, for an
absolute encoding, its table (``--<encoding>-max-len``, learned embeddings). A test sentence
beyond the source limit is not translated and is reported as such (:class:`Untranslatable`,
used by ``examples/wmt/reproduce.py``), never silently dropped.
"""

import argparse  # no ``from __future__ import annotations``: fairseq reads the config's
# field types at run time
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from fairseq.data import data_utils
from fairseq.utils import resolve_max_positions
from fairseq.tasks import register_task

from ..core.encodings import get_encoding
from .translation_scaling import RopeScalingConfig, RopeScalingTask
from .position_args import encoding_values
from .encoding_record import has_record, stack_names


@dataclass
class TranslationExtrapolationConfig(RopeScalingConfig):
    train_max_len: int = field(default=0, metadata={
        "help": "train on sentence pairs of at most this many tokens per side (subwords and "
                "the end of sentence, as fairseq counts them); 0: no limit"})


@register_task("translation_extrapolation", dataclass=TranslationExtrapolationConfig)
class TranslationExtrapolationTask(RopeScalingTask):
    """fairseq's ``translation`` that trains on short pairs only (``--train-max-len``), and
    translates with ``--rope-scaling`` (:mod:`.translation_scaling`)."""

    def filter_indices_by_size(self, indices, dataset, max_positions=None,
                               ignore_invalid_inputs=False):
        limit = self.cfg.train_max_len
        if limit and dataset is self.datasets.get("train"):
            if limit < 2:
                raise ValueError("--train-max-len counts the end of sentence too: give at "
                                 "least 2 (one token and </s>)")
            max_positions = resolve_max_positions(max_positions, (limit, limit))
            ignore_invalid_inputs = True  # dropping the long pairs is the point
        return super().filter_indices_by_size(indices, dataset, max_positions,
                                              ignore_invalid_inputs)


@dataclass(frozen=True)
class LengthLimits:
    """The longest source and target (tokens with the end of sentence) a model represents,
    and the flag that sets each."""

    source: int
    target: int
    source_flag: str
    target_flag: str


def length_limits(model_args: argparse.Namespace) -> LengthLimits:
    """From a checkpoint's model configuration (``cfg["model"]``, or its ``args``): the
    source's from the encoder's encoding, the target's from the decoder's."""
    names = stack_names(model_args)

    def limit(positions_flag: str, positions: int) -> tuple[int, str]:
        stack = "encoder" if "source" in positions_flag else "decoder"
        encoding = get_encoding(names[stack])
        values = encoding_values(model_args, encoding)
        table = encoding.max_length(values, positions)
        if table is not None and table < positions:
            return table, encoding.max_length_flag(values) or positions_flag
        return positions, positions_flag

    source, source_flag = limit("--max-source-positions", model_args.max_source_positions)
    target, target_flag = limit("--max-target-positions", model_args.max_target_positions)
    return LengthLimits(source, target, source_flag, target_flag)


@dataclass(frozen=True)
class Untranslatable:
    """What a model cannot represent of one test set (:func:`length_limits` against the
    binarized source lengths): these sources are not translated, and outputs are capped
    where the decoder's table is shorter than fairseq's default maximum output."""

    limits: LengthLimits
    sentences: frozenset[int]  # ids of the sources longer than ``limits.source``
    fairseq_max_len_b: int = 200  # fairseq-generate's default maximum output length

    @classmethod
    def of(cls, limits: LengthLimits, source_lengths: Sequence[int]) -> "Untranslatable":
        return cls(limits, frozenset(i for i, n in enumerate(source_lengths)
                                     if n > limits.source))

    @property
    def target_cap(self) -> Optional[int]:
        """Maximum output tokens when the decoder's table cuts fairseq's default."""
        cap = self.limits.target - 1  # one position for the end of sentence
        return cap if cap < self.fairseq_max_len_b else None

    def generate_flags(self) -> list[str]:
        flags = []
        if self.sentences:  # fairseq skips (and logs) them; evaluate() reports them
            flags += ["--max-source-positions", str(self.limits.source),
                      "--skip-invalid-size-inputs-valid-test"]
        if self.target_cap is not None:
            flags += ["--max-len-a", "0", "--max-len-b", str(self.target_cap)]
        return flags

    def notes(self, label: str) -> list[str]:
        out = []
        if self.sentences:
            out.append(f"{label}: {len(self.sentences)} test sources longer than the "
                       f"{self.limits.source} positions it represents "
                       f"({self.limits.source_flag}) were not translated (empty hypotheses, "
                       "counted in their length bucket)")
        if self.target_cap is not None:
            out.append(f"{label}: outputs capped at {self.target_cap} tokens, the "
                       f"decoder's {self.limits.target} positions ({self.limits.target_flag})")
        return out


def checkpoint_limits(checkpoint: Path) -> LengthLimits:
    """:func:`length_limits` of a fairseq checkpoint's model configuration (memory-mapped:
    the weights are not read). :class:`ValueError` naming the file when it is damaged
    (:class:`~.checkpoint.DamagedCheckpoint`) or holds no ``transformer_posenc`` model's
    configuration; one saved before a position flag existed gets the flag's default."""
    import copy

    from fairseq.models.transformer import (DEFAULT_MAX_SOURCE_POSITIONS,
                                            DEFAULT_MAX_TARGET_POSITIONS)
    from omegaconf import DictConfig, OmegaConf

    from .checkpoint import load
    from .position_args import fill_position_defaults

    state = load(checkpoint, mmap=True)
    cfg = state.get("cfg") if isinstance(state, dict) else None
    model = cfg.get("model") if cfg is not None else (
        state.get("args") if isinstance(state, dict) else None)
    if isinstance(model, DictConfig):
        model = argparse.Namespace(**OmegaConf.to_container(model, resolve=True))
    if not has_record(model):
        what = (f"a model of --arch {model.arch}" if hasattr(model, "arch")
                else f"no model configuration (its entries: {', '.join(map(str, state))})"
                if isinstance(state, dict) else f"a {type(state).__name__}")
        raise ValueError(f"{checkpoint} is not a checkpoint of a fairseq-posenc model: it holds "
                         f"{what}. Translate a checkpoint_*.pt that fairseq-train wrote with "
                         "--user-dir fairseq_posenc and an --arch transformer_*_ENCODING")
    model = copy.copy(model)
    fill_position_defaults(model)  # flags added since the checkpoint was saved
    model.max_source_positions = (getattr(model, "max_source_positions", None)
                                  or DEFAULT_MAX_SOURCE_POSITIONS)
    model.max_target_positions = (getattr(model, "max_target_positions", None)
                                  or DEFAULT_MAX_TARGET_POSITIONS)
    return length_limits(model)


def source_sizes(data: Path, split: str, src: str, tgt: str) -> list[int]:
    """Tokens (with the end of sentence) of each binarized source of ``split``; the pair's
    files may be named either way round, as fairseq's translation task accepts."""
    quiet = logging.getLogger("fairseq.data.data_utils")  # one INFO line per load
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
            prefix = str(data / f"{split}.{pair}.{src}")
            dataset = data_utils.load_indexed_dataset(prefix, None)
            if dataset is not None:
                return [int(n) for n in dataset.sizes]
    finally:
        quiet.setLevel(level)
    raise FileNotFoundError(f"{data}/{split}.{src}-{tgt}.{src}.bin/.idx not found: binarize "
                            f"the {split} split with fairseq-preprocess (examples/wmt: rerun "
                            "prepare.py)")
