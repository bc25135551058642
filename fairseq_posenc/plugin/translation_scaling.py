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

The flags are made from the registry of RoPE scalings when the parser is built
(:mod:`.scaling_config`): ``--rope-scaling``'s choices are the registered scalings, a
``--user-dir``'s among them, and each scaling's options are flags, checked as declared.
A scaling that reads the training length ``L`` (YaRN, Llama 3's scaling, dynamic NTK) takes
``--rope-scaling-original-len``, else the
checkpoint's own record of it, ``--train-max-len`` (``translation_extrapolation``'s limit on
every training source and target), else an error that names the flag. fairseq keeps no
record of the longest sentence a model was trained on; the limit is what the project
records. Llama 3's two factors are its options (``--rope-scaling-low-freq-factor``,
``--rope-scaling-high-freq-factor``). Dynamic NTK's decoder (a ``per_sequence`` scaling's)
reads the generator's length settings, which the tasks give the models when they build the
generator (:mod:`fairseq_posenc.plugin.rope_lengths`).

Bad input is an error before any work: the flags' values when the task is set up (a
factor below 1, a factor or a length without ``--rope-scaling``, a length with a scaling
that reads none, a scaling's options with another scaling or of values it refuses), and
what needs the checkpoint (an encoding that is no rotation, no training length where one
is needed) when its configuration is read, before its model is built. A checkpoint with an
encoding per stack is scaled where it has a rotation: in the stacks of ``rope`` or ``xpos``
(the other stack's encoding reads no scaling), and refused only where neither stack has one.
``fairseq-train`` builds its model without a checkpoint: the scaling there is an error too
(translation only).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Optional

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.tasks.translation import TranslationTask

from ..core.encodings import ENCODINGS, get_encoding
from ..core.rope_scaling import RopeScaling, scaling_from_values, scaling_names
from .rope_lengths import set_decode_bound
from .scaling_config import RopeScalingConfig, refresh_task_config

__all__ = ["RopeScalingConfig", "RopeScalingTask", "model_scaling", "requested_scaling",
           "set_on_model_config"]

logger = logging.getLogger(__name__)


def requested_scaling(cfg) -> Optional[RopeScaling]:
    """The scaling the task's options ask for (None: none), checked; the training length
    may still be missing (the checkpoint may know it)."""
    return scaling_from_values({name: getattr(cfg, name, None) for name in scaling_names()})


def rotations() -> list[str]:
    """The encodings that read a RoPE scaling (RoPE's rotations)."""
    return sorted(name for name, cls in ENCODINGS.items() if "rope_scaling" in cls.structural)


def set_on_model_config(scaling: RopeScaling, model_cfg: argparse.Namespace) -> None:
    """Check ``scaling`` against a checkpoint's model configuration, complete the training
    length from it where the scaling reads one, and set it there for the model to read."""
    from .encoding_record import has_record, stack_names

    # a stack of a rotation is scaled, the other left as trained
    names = stack_names(model_cfg)
    if not has_record(model_cfg) or not any(
            "rope_scaling" in get_encoding(n).structural for n in names.values()):
        trained = ("no --pos-encoding (not a transformer_posenc model)"
                   if not has_record(model_cfg) else
                   f"--pos-encoding {names['encoder']}" if len(set(names.values())) == 1 else
                   f"--encoder-pos-encoding {names['encoder']} --decoder-pos-encoding "
                   f"{names['decoder']}")
        readers = rotations()
        raise ValueError(f"--rope-scaling rescales a rotation's frequencies: it applies to "
                         f"checkpoints of --pos-encoding {', '.join(readers[:-1])} or "
                         f"{readers[-1]}, and this one has {trained}; drop the --rope-scaling "
                         "flags")
    if scaling.spec.reads_length and scaling.original_len is None:
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
    values = {"rope_scaling": scaling.kind, "rope_scaling_factor": scaling.factor,
              "rope_scaling_original_len": scaling.original_len, **scaling.options}
    for name in scaling_names():
        setattr(model_cfg, name, values.get(name))


def model_scaling(model_cfg: argparse.Namespace) -> Optional[RopeScaling]:
    """The scaling a model's configuration carries (set by the tasks below), or None."""
    kind = getattr(model_cfg, "rope_scaling", None)
    if kind is None or str(kind) == "none":
        return None
    return scaling_from_values({name: getattr(model_cfg, name, None)
                                for name in scaling_names()})


class RopeScalingTask(TranslationTask):
    """fairseq's ``translation`` whose models loaded from a checkpoint get
    ``--rope-scaling``'s frequencies (the base of the plugin's tasks)."""

    @classmethod
    def add_args(cls, parser):
        """The task's flags, the scalings' from every scaling registered now (a
        ``--user-dir``'s too: :mod:`.scaling_config`)."""
        gen_parser_from_dataclass(parser, refresh_task_config(cls)())

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
