"""Registered architectures: for every encoding NAME,

* ``transformer_wmt_en_de_NAME`` -- fairseq's ``transformer_wmt_en_de`` (the papers'
  6+6-layer Transformer base: 512 wide, 8 heads, FFN 2048);
* ``transformer_tiny_NAME`` -- 2+2 layers, 128 wide, 4 heads, FFN 256, for tests and demos;

An encoding defined for causal attention only (``path``, ``stickbreaking``), as the
architecture's or as ``--pos-encoding``, is the decoder's; the encoder's is ``sinusoidal``
unless ``--encoder-pos-encoding`` says otherwise.

Plus ``transformer_posenc`` / ``transformer_posenc_tiny`` at the same sizes, where
``--pos-encoding`` chooses the encoding. An architecture's encoding is ``--pos-encoding``'s,
the default of each stack's (``--encoder-pos-encoding``, ``--decoder-pos-encoding``:
:mod:`.stacks`). Architecture functions only fill in values that
are unset, because fairseq runs them again on the saved arguments of a checkpoint, whose
record of the encodings (:mod:`.encoding_record`) they read as it is.
"""

from __future__ import annotations

import argparse
import functools
from typing import Callable, Optional

from fairseq.models import ARCH_MODEL_REGISTRY, register_model_architecture
from fairseq.models.transformer import base_architecture, transformer_wmt_en_de

from ..core.encodings import ENCODINGS
from ..core.encodings.registry import CHECKS, LISTENERS
from .encoding_record import DEFAULT_ENCODING, one_encoding
from .position_args import fill_position_defaults

MODEL = "transformer_posenc"


def tiny(args: argparse.Namespace) -> None:
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 128)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 256)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    base_architecture(args)


SIZES: dict[str, Callable[[argparse.Namespace], None]] = {
    "transformer_wmt_en_de": transformer_wmt_en_de,
    "transformer_tiny": tiny,
}


def _architecture(
    arch: str, size: Callable[[argparse.Namespace], None], encoding: Optional[str]
) -> None:
    def configure(args: argparse.Namespace) -> None:
        chosen = getattr(args, "pos_encoding", None)
        if encoding is not None:
            # a record of one encoding in both stacks other than the architecture's
            # (``--encoder-pos-encoding X --decoder-pos-encoding X``) names it here too
            if chosen not in (None, encoding, one_encoding(args)):
                raise ValueError(
                    f"--arch {arch} is the {encoding} model but --pos-encoding {chosen} was "
                    f"given; use --arch transformer_{encoding_free(arch)}_{chosen}, or "
                    "--arch transformer_posenc[_tiny] --pos-encoding NAME."
                )
            args.pos_encoding = chosen or encoding
        named = getattr(args, "pos_encoding", None)
        if (named in ENCODINGS and ENCODINGS[named].causal_only()
                and getattr(args, "encoder_pos_encoding", None) is None):
            # defined for the decoder only: the encoder's is the default one
            args.encoder_pos_encoding = DEFAULT_ENCODING
        fill_position_defaults(args)
        size(args)

    register_model_architecture(MODEL, arch)(configure)


def encoding_free(arch: str) -> str:
    return "tiny" if arch.startswith("transformer_tiny") else "wmt_en_de"


@functools.lru_cache(maxsize=None)
def fairseq_flags() -> frozenset[str]:
    """The flags ``fairseq-train`` parses beside the encodings' options: its own and those of
    the transformer model, and the plugin's position flags."""
    from fairseq import options
    from fairseq.models.transformer import TransformerModel

    from .position_args import add_position_args

    parser = options.get_training_parser()
    TransformerModel.add_args(parser)
    add_position_args(parser)
    encodings = {option.flag for cls in ENCODINGS.values() for option in cls.options}
    return frozenset(flag for action in parser._actions for flag in action.option_strings
                     if flag not in encodings)


def check_flags_are_free(encoding: type) -> None:
    """An option whose flag fairseq-train has already (``dropout``: ``--dropout``) would
    stop every command that loads the plugin: refused when the encoding registers."""
    taken = [option.flag for option in encoding.options if option.flag in fairseq_flags()]
    if taken:
        raise ValueError(
            f"{encoding.__module__}.{encoding.__qualname__}: option {', '.join(taken)} is "
            f"already a flag of fairseq-train (or of the model): rename it, e.g. with the "
            f"encoding's name as a prefix ({encoding.name}_...)")


def encoding_architectures(encoding: type) -> None:
    """``transformer_tiny_NAME`` and ``transformer_wmt_en_de_NAME`` for ``encoding``; kept
    as they are when a name comes back (an encoding registered again in one process: the
    architecture reads the encoding by name)."""
    for size, fn in SIZES.items():
        if f"{size}_{encoding.name}" not in ARCH_MODEL_REGISTRY:
            _architecture(f"{size}_{encoding.name}", fn, encoding.name)


_architecture("transformer_posenc", transformer_wmt_en_de, None)
_architecture("transformer_posenc_tiny", tiny, None)
for _name in sorted(ENCODINGS):
    encoding_architectures(ENCODINGS[_name])
# An encoding registered later (a user's, from their --user-dir) gets its own too, once its
# flags are known not to be fairseq's.
CHECKS.append(check_flags_are_free)
LISTENERS.append(encoding_architectures)
