"""The model's position flags, and their values turned into the core's plain arguments.

Every encoding's options (:mod:`fairseq_posenc.core.encodings.options`, its constructor's
keyword arguments) become flags here: option ``shaw_clip`` is ``--shaw-clip``, with the
declared default, type, choices and help (prefixed with the encodings that declare it; an
option two encodings declare is one flag). Beside them: ``--pos-encoding`` (and one per stack,
``--encoder-pos-encoding`` and ``--decoder-pos-encoding``: :mod:`.stacks`), ``--pos-layers``,
``--pos-kernels``, ``--keep-input-positions``, ``--random-positions`` and the segment flags.

fairseq parses model flags with ``argument_default=SUPPRESS`` and leaves defaults to the
architecture function, so :func:`fill_position_defaults` reads them off the flags;
:func:`configure_positions` checks the values before anything is built, and
:func:`encoding_values` gives an encoding its options from the parsed flags, the one place
where the core receives anything of a Namespace.
"""

from __future__ import annotations

import argparse
from typing import Any

from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

from ..core.encodings import ENCODINGS
from ..core.encodings.base import LAYER_CHOICES, PositionEncoding
from ..core.encodings.options import Declared
from ..core.encodings.registry import option_owners, option_values
from ..core.random_positions import FLAG as RANDOM_POSITIONS
from ..core.kernel_choice import KERNEL_CHOICES
from . import encoding_record
from .encoding_record import DEFAULT_ENCODING, STACKS, stack_names
from .stacks import (SIDES, add_stack_args, check_input_flags, settle_input_flags,
                     stack_encodings, stack_label)

#: ``--num-segments``: at least one segment.
NUM_SEGMENTS_HINT = "Use the most segments a source has."


def add_position_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("position encoding (fairseq-posenc)")
    group.add_argument(
        "--pos-encoding", choices=sorted(ENCODINGS), default=None,
        help=f"position encoding (default: the architecture's, else {DEFAULT_ENCODING})")
    add_stack_args(group)
    group.add_argument(
        "--pos-layers", choices=LAYER_CHOICES, default=None,
        help="self-attention layers that get an attention-level encoding: all, or the "
        "first of each stack (default: first for at5, at5_nob, t5_nob as in AT5's "
        "translation setting, all for the others)")
    group.add_argument(
        "--pos-kernels", choices=KERNEL_CHOICES, default="auto",
        help="auto: on CUDA in fp16/bf16, the Triton kernels of fairseq_posenc/core/kernels "
        "(distance biases and factors, Shaw's terms, RoPE's rotation), each after a "
        "once-per-process check against torch's path; torch: torch's paths only (the same "
        "numbers up to rounding, with B x H x T x T tensors for the distance terms)")
    group.add_argument(
        "--keep-input-positions", action="store_true",
        help="with an attention-level encoding, also keep fairseq's input position "
        "embeddings (ablation; the papers remove them)")
    group.add_argument(
        RANDOM_POSITIONS, type=int, default=None, metavar="L",
        help="training draws each sequence's positions as a sorted random subset of "
             "[0, L) (Ruoss et al. 2023); evaluation uses 0..n-1. L: more than the longest "
             "test sentence; for the input encodings, sinusoidal and learned, and the "
             "attention-level ones that read positions or distances")
    owners = option_owners()
    added: set[str] = set()
    for encoding in ENCODINGS.values():
        for option in encoding.options:
            if option.name not in added:
                add_option_flag(group, option, owners[option.name])
                added.add(option.name)
    add_segment_args(group)


def add_option_flag(group: argparse._ActionsContainer, option: Declared,
                    owners: list[str]) -> None:
    """``option`` as a flag: a switch, or a value of its type, choices and default."""
    text = f"{', '.join(owners)}: {option.help}" if option.help else ", ".join(owners)
    if option.type is None:
        group.add_argument(option.flag, action="store_true", help=text)
    else:
        group.add_argument(option.flag, type=None if option.choices else option.type,
                           default=option.default, metavar=option.metavar,
                           choices=option.choices, help=text)


def add_segment_args(group: argparse._ActionsContainer) -> None:
    group.add_argument("--segment-attention", action="store_true",
                       help="per-head segment attention S[l,h][seg(i), seg(j)] in encoder "
                       "self-attention (DIET)")
    group.add_argument("--segment-embedding", action="store_true",
                       help="BERT-style segment embedding added to the source input")
    group.add_argument("--num-segments", type=int, default=2, metavar="K",
                       help="segments per source for --segment-attention / "
                       "--segment-embedding (default 2)")
    group.add_argument("--segment-separator", default="<sep>", metavar="TOKEN",
                       help="source token that ends a segment (default <sep>)")


def fill_position_defaults(args: argparse.Namespace) -> None:
    """Give unset position flags their defaults (each written once, with its flag)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_position_args(parser)
    for action in parser._actions:
        if not hasattr(args, action.dest):
            setattr(args, action.dest, action.default)


def encoding_values(args: argparse.Namespace,
                    encoding: type[PositionEncoding]) -> dict[str, Any]:
    """``encoding``'s options from the parsed flags, checked (a ``ValueError`` naming the
    flag)."""
    given = {option.name: getattr(args, option.name) for option in encoding.options
             if hasattr(args, option.name)}
    return option_values(encoding, given)


def check_foreign_flags(args: argparse.Namespace, *encodings: type[PositionEncoding]) -> None:
    """A flag of an encoding that none of ``encodings`` (the stacks') is, given a value (not
    its default): an error that names the flag and the encodings it belongs to, before
    anything is built."""
    own = {option.name for encoding in encodings for option in encoding.options}
    declared = {option.name: option for other in ENCODINGS.values() for option in other.options}
    names = list(dict.fromkeys(e.name for e in encodings))
    where = (f"--pos-encoding {names[0]}, which has no use" if len(names) == 1 else
             f"the stacks' encodings ({' and '.join(names)}), neither of which has any use")
    for name, names_of in option_owners().items():
        option = declared[name]
        value = getattr(args, name, option.default)
        if name not in own and value is not None and value != option.default:
            raise ValueError(
                f"{option.flag} is a flag of --pos-encoding {', '.join(names_of)}, not of "
                f"{where} for it: remove it, or choose an encoding it belongs to.")


def uses_segments(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "segment_attention", False)
                or getattr(args, "segment_embedding", False))


def separator_index(args: argparse.Namespace, dictionary) -> int:
    index = dictionary.index(args.segment_separator)
    if index == dictionary.unk():
        raise ValueError(
            f"--segment-separator {args.segment_separator!r} is not in the source dictionary; "
            "join the sentences of each source with that token before fairseq-preprocess, or "
            "pass the separator your data uses.")
    return index


def configure_positions(args: argparse.Namespace) -> None:
    """Validate the position flags and set fairseq's own position-embedding flags; then
    write the stacks' encodings into ``args`` as the checkpoint's record of them
    (:mod:`.encoding_record`)."""
    names = stack_names(args)
    encodings = stack_encodings(args)
    check_foreign_flags(args, *encodings.values())
    encoder = encodings["encoder"]
    if encoder.causal_only():
        raise ValueError(
            f"{stack_label(args, 'encoder')} is defined for causal attention only (a "
            f"decoder's self-attention), not for the encoder: give it to the decoder with "
            f"another encoding for the encoder, e.g. --encoder-pos-encoding sinusoidal "
            f"--decoder-pos-encoding {encoder.name} (--arch transformer_tiny_{encoder.name} "
            "does that).")
    values = {stack: encoding_values(args, encoding) for stack, encoding in encodings.items()}
    if uses_segments(args) and not (isinstance(args.num_segments, int)
                                    and args.num_segments >= 1):
        raise ValueError(f"--num-segments must be a positive integer, got "
                         f"{args.num_segments!r}. {NUM_SEGMENTS_HINT}")
    limits = {"encoder": getattr(args, "max_source_positions", None)
              or DEFAULT_MAX_SOURCE_POSITIONS,
              "decoder": getattr(args, "max_target_positions", None)
              or DEFAULT_MAX_TARGET_POSITIONS}
    for stack in STACKS:
        check_random_positions(args, encodings[stack], values[stack], limits[stack], stack)
    check_input_flags(args)
    settle_input_flags(args)
    encoding_record.write(args, names)


def check_random_positions(args: argparse.Namespace, encoding: type[PositionEncoding],
                           values: dict[str, Any], max_positions: int,
                           stack: str = "encoder") -> None:
    """``--random-positions`` in ``stack``: a positive span, an encoding it applies to (the
    flag is the model's: every stack draws, so each stack's encoding must take it), and a
    span that fits the stack's table of positions (``max_positions``); a ``ValueError``
    naming the flag."""
    span = getattr(args, "random_positions", None)
    if span is None:
        return
    if span < 1:
        raise ValueError(f"{RANDOM_POSITIONS} must be a positive integer (the number of "
                         f"positions drawn from), got {span}. Leave it unset for positions "
                         "0..n-1.")
    chosen = stack_label(args, stack)
    refusal = encoding.random_positions_refusal(values)
    if refusal is not None:
        raise ValueError(f"{RANDOM_POSITIONS} cannot apply to {chosen}: {refusal}.")
    side = SIDES[stack]
    default_flag = f"--max-{side}-positions"
    limit = encoding.max_length(values, max_positions)
    flag = encoding.max_length_flag(values) or default_flag
    learned_input = bool(getattr(args, f"{stack}_learned_pos", False))
    if limit is None and learned_input and getattr(args, "keep_input_positions", False):
        limit, flag = max_positions, default_flag  # fairseq's learned input table, kept
    if limit is not None and span > limit:
        raise ValueError(
            f"{RANDOM_POSITIONS} {span} draws positions up to {span - 1}, but "
            f"{chosen} has a table of {limit} {side} positions "
            f"({flag}): raise {flag} to at least {span}, or give a smaller "
            f"{RANDOM_POSITIONS}.")
