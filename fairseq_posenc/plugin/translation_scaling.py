"""``--rope-scaling`` at translation time: the plugin's tasks carry it to the model that
``fairseq-generate`` (or ``fairseq-interactive``) loads from a checkpoint.

A generation command's flags reach its task (``--task``) and no model: fairseq parses them
with the task's options, and builds each checkpoint's model through the task,
``task.build_model(cfg, from_checkpoint=True)``, where ``cfg`` is the model configuration
the checkpoint saved (for this args-based model, the training command's namespace). So
``translation_extrapolation`` and ``translation_gnmt`` take the options and set them
on that configuration just before the model is built; the model reads them there
(:func:`model_scaling`) and gives them to RoPE's modules. A checkpoint trained without scaling is
translated with it from the flags alone: no edited checkpoint, no ``--model-overrides``::

    fairseq-generate DATA --user-dir fairseq_posenc --task translation_extrapolation \\
        --path checkpoint_best.pt --rope-scaling yarn --rope-scaling-factor 4 ...

YaRN, Llama 3's scaling and dynamic NTK need the training length ``L``:
``--rope-scaling-original-len``, else the
checkpoint's own record of it, ``--train-max-len`` (``translation_extrapolation``'s limit on
every training source and target), else an error that names the flag. fairseq keeps no
record of the longest sentence a model was trained on; the limit is what the project
records. Llama 3's two factors have their own flags (``--rope-scaling-low-freq-factor``,
``--rope-scaling-high-freq-factor``). Dynamic NTK's decoder reads the generator's length
settings, which the tasks give the models when they build the generator
(:mod:`fairseq_posenc.plugin.rope_lengths`).

Bad input is an error before any work: the flags' values when the task is set up (a
factor below 1, a factor or a length without ``--rope-scaling``, a length with a scaling
that reads none, Llama 3's factors with another scaling), and what needs the checkpoint (an
encoding other than ``rope`` and ``xpos``, no training length where one is needed) when its
configuration is read, before its model is built. A checkpoint with an encoding per stack is
scaled where it has a rotation: in the stacks of ``rope`` or ``xpos`` (the other stack's
encoding reads no scaling), and refused only where neither stack has one. ``fairseq-train``
builds its model without a checkpoint: the scaling there is an error too (translation only).
"""

import argparse  # no ``from __future__ import annotations``: fairseq reads the config's
# field types at run time
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..core.encodings import get_encoding
from ..core.encodings.rope import Rope
from ..core.rope_scaling import NEEDS_LENGTH, SCALINGS, RopeScaling
from .rope_lengths import set_decode_bound

logger = logging.getLogger(__name__)


@dataclass
class RopeScalingConfig(TranslationConfig):
    rope_scaling: Optional[ChoiceEnum(list(SCALINGS))] = field(default=None, metadata={
        "help": "translation only, --pos-encoding rope or xpos: rescale the rotation's "
                "frequencies for sentences longer than the training ones: linear (position "
                "interpolation, Chen et al. 2023), ntk (NTK-aware base), yarn (Peng et al. "
                "2023, with its attention temperature), llama3 (Llama 3.1's), dynamic "
                "(dynamic NTK: the base from each sentence's length bound)"})
    rope_scaling_factor: Optional[float] = field(default=None, metadata={
        "help": "with --rope-scaling: the scale factor s >= 1, the new length over the "
                "training length"})
    rope_scaling_original_len: Optional[int] = field(default=None, metadata={
        "help": "with --rope-scaling yarn, llama3 or dynamic: the training length L in "
                "tokens with </s> (default: the checkpoint's --train-max-len)"})
    rope_scaling_low_freq_factor: Optional[float] = field(default=None, metadata={
        "help": "with --rope-scaling llama3: wavelengths above L / this are interpolated "
                "(default 1, Llama 3.1's)"})
    rope_scaling_high_freq_factor: Optional[float] = field(default=None, metadata={
        "help": "with --rope-scaling llama3: wavelengths below L / this are kept "
                "(default 4, Llama 3.1's)"})


def requested_scaling(cfg) -> Optional[RopeScaling]:
    """The scaling the task's options ask for (None: none), checked; YaRN's training
    length may still be missing (the checkpoint may know it)."""
    kind = cfg.rope_scaling
    if kind is None:
        given = [flag for flag, value in (
            ("--rope-scaling-factor", cfg.rope_scaling_factor),
            ("--rope-scaling-original-len", cfg.rope_scaling_original_len),
            ("--rope-scaling-low-freq-factor", cfg.rope_scaling_low_freq_factor),
            ("--rope-scaling-high-freq-factor", cfg.rope_scaling_high_freq_factor))
            if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} go with --rope-scaling "
                             f"{{{','.join(SCALINGS)}}}: add it, or drop them")
        return None
    if cfg.rope_scaling_factor is None:
        raise ValueError(f"--rope-scaling {kind} needs --rope-scaling-factor S: the new "
                         "length over the training length, at least 1")
    return RopeScaling(str(kind), float(cfg.rope_scaling_factor),
                       cfg.rope_scaling_original_len, cfg.rope_scaling_low_freq_factor,
                       cfg.rope_scaling_high_freq_factor)


def set_on_model_config(scaling: RopeScaling, model_cfg: argparse.Namespace) -> None:
    """Check ``scaling`` against a checkpoint's model configuration, complete YaRN's
    training length from it, and set it there for the model to read."""
    from .encoding_record import has_record, stack_names

    # a stack of a rotation is scaled, the other left as trained
    names = stack_names(model_cfg)
    if not has_record(model_cfg) or not any(
            issubclass(get_encoding(n), Rope) for n in names.values()):
        trained = ("no --pos-encoding (not a transformer_posenc model)"
                   if not has_record(model_cfg) else
                   f"--pos-encoding {names['encoder']}" if len(set(names.values())) == 1 else
                   f"--encoder-pos-encoding {names['encoder']} --decoder-pos-encoding "
                   f"{names['decoder']}")
        raise ValueError(f"--rope-scaling rescales a rotation's frequencies: it applies to "
                         f"checkpoints of --pos-encoding rope or xpos, and this one has "
                         f"{trained}; drop the --rope-scaling flags")
    if scaling.kind in NEEDS_LENGTH and scaling.original_len is None:
        recorded = getattr(model_cfg, "train_max_len", 0) or None
        if recorded is None:
            raise ValueError(f"--rope-scaling {scaling.kind} needs the training length: give "
                             "--rope-scaling-original-len N (the longest training source, "
                             "in tokens with </s>); this checkpoint records none (it was "
                             "not trained with --task translation_extrapolation "
                             "--train-max-len)")
        scaling = dataclasses.replace(scaling, original_len=int(recorded))
        logger.info("--rope-scaling %s: training length %d, the checkpoint's "
                    "--train-max-len", scaling.kind, scaling.original_len)
    model_cfg.rope_scaling = scaling.kind
    model_cfg.rope_scaling_factor = scaling.factor
    model_cfg.rope_scaling_original_len = scaling.original_len
    model_cfg.rope_scaling_low_freq_factor = scaling.low_freq_factor
    model_cfg.rope_scaling_high_freq_factor = scaling.high_freq_factor


def model_scaling(model_cfg: argparse.Namespace) -> Optional[RopeScaling]:
    """The scaling a model's configuration carries (set by the tasks below), or None."""
    kind = getattr(model_cfg, "rope_scaling", None)
    if kind is None or str(kind) == "none":
        return None
    return RopeScaling(str(kind), float(model_cfg.rope_scaling_factor),
                       getattr(model_cfg, "rope_scaling_original_len", None),
                       getattr(model_cfg, "rope_scaling_low_freq_factor", None),
                       getattr(model_cfg, "rope_scaling_high_freq_factor", None))


class RopeScalingTask(TranslationTask):
    """fairseq's ``translation`` whose models loaded from a checkpoint get
    ``--rope-scaling``'s frequencies (the base of the plugin's tasks)."""

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        requested_scaling(cfg)  # the flags' values, before the dictionaries are read
        return super().setup_task(cfg, **kwargs)

    def build_model(self, cfg, from_checkpoint=False):
        scaling = requested_scaling(self.cfg)
        if scaling is not None:
            if not from_checkpoint:
                raise ValueError("--rope-scaling applies when a trained checkpoint is loaded "
                                 "to translate (fairseq-generate, fairseq-interactive); a "
                                 "model trained with it would be translated without it: "
                                 "drop the --rope-scaling flags from fairseq-train")
            set_on_model_config(scaling, cfg)
        return super().build_model(cfg, from_checkpoint)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        generator = super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        set_decode_bound(models, generator)  # --rope-scaling dynamic's decoder bound
        return generator
