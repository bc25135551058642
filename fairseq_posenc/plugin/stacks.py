"""An encoding per stack: ``--encoder-pos-encoding`` and ``--decoder-pos-encoding``, each
``--pos-encoding`` (the architecture's) unless given.

fairseq's ``TransformerModel`` configures its input position embeddings with one flag for
both stacks (``--no-token-positional-embeddings``) and one per stack (``--encoder-learned-pos``,
``--decoder-learned-pos``). The plugin builds its stacks itself, each from a view of the
arguments (:func:`stack_args`) in which that one flag is the stack's own: every pair of
encodings can be built, input-level or attention-level in either stack (``none`` in one,
``learned`` in the other included). The model's own arguments keep the shared flag on only
where both stacks want it (:func:`settle_input_flags`), so that ``build_model`` on a
checkpoint's saved arguments reaches the same stacks again.

A model's encodings are its tag (:func:`model_tag`): the name where both stacks have the
same encoding (as every checkpoint written before this flag has), ``ENCODER/DECODER``
otherwise. Its arguments record them as :mod:`.encoding_record` says, and every stack's
encoding is read there (:func:`~.encoding_record.stack_names`).
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

from ..core.encodings import ENCODINGS, get_encoding
from ..core.encodings.base import PositionEncoding
from .encoding_record import STACKS, default_encoding, stack_names

#: Each stack's source of positions: the side its max positions flag names.
SIDES = {"encoder": "source", "decoder": "target"}


def add_stack_args(group: argparse._ActionsContainer) -> None:
    for stack in STACKS:
        group.add_argument(
            f"--{stack}-pos-encoding", choices=sorted(ENCODINGS), default=None,
            help=f"the {stack}'s position encoding (default: --pos-encoding); an "
                 "encoding's options apply to every stack that uses it")


def stack_encodings(args: argparse.Namespace) -> dict[str, type[PositionEncoding]]:
    return {stack: get_encoding(name) for stack, name in stack_names(args).items()}


def model_tag(args: argparse.Namespace) -> str:
    """The model's encodings in one name: ``NAME``, or ``ENCODER/DECODER`` for a pair."""
    names = stack_names(args)
    if names["encoder"] == names["decoder"]:
        return names["encoder"]
    return f"{names['encoder']}/{names['decoder']}"


def stack_flag(args: argparse.Namespace, stack: str) -> str:
    """The flag that chose ``stack``'s encoding, for messages."""
    if getattr(args, f"{stack}_pos_encoding", None) not in (None, default_encoding(args)):
        return f"--{stack}-pos-encoding {getattr(args, f'{stack}_pos_encoding')}"
    return f"--pos-encoding {default_encoding(args)}"


def stack_label(args: argparse.Namespace, stack: str) -> str:
    """``stack``'s encoding for messages: ``--pos-encoding NAME`` where both stacks have
    it, else the flag that chose it and the stack."""
    if len(set(stack_names(args).values())) == 1:
        return f"--pos-encoding {default_encoding(args)}" if stack_names(args)[stack] == \
            default_encoding(args) else stack_flag(args, stack)
    return f"{stack_flag(args, stack)} (the {stack})"


def input_flags(args: argparse.Namespace, stack: str) -> tuple[bool, bool]:
    """``stack``'s fairseq input embedding: (no input positions, a learned table)."""
    encoding = get_encoding(stack_names(args)[stack])
    if encoding.at_input:
        return encoding.fairseq_flags
    no_positions = (bool(args.no_token_positional_embeddings)
                    if getattr(args, "keep_input_positions", False) else True)
    return no_positions, bool(getattr(args, f"{stack}_learned_pos", False))


def check_input_flags(args: argparse.Namespace) -> None:
    """fairseq's own input flags given against an input-level encoding of a stack: an
    error (they would choose another input encoding than the stack's)."""
    for stack, encoding in stack_encodings(args).items():
        if not encoding.at_input:
            continue
        given = (bool(args.no_token_positional_embeddings),
                 bool(getattr(args, f"{stack}_learned_pos", False)))
        if given not in (encoding.fairseq_flags, (False, False)):
            inputs = ", ".join(n for n, e in sorted(ENCODINGS.items()) if e.at_input)
            raise ValueError(
                f"{stack_label(args, stack)} conflicts with "
                f"--no-token-positional-embeddings / --{stack}-learned-pos: choose the "
                f"input encoding with --pos-encoding or --{stack}-pos-encoding ({inputs}) "
                "alone.")


def settle_input_flags(args: argparse.Namespace) -> None:
    """Write each stack's input flags into the model's arguments: the shared
    ``no_token_positional_embeddings`` where both stacks want it (else off: each stack's
    view turns it on for itself), ``STACK_learned_pos`` per stack."""
    flags = {stack: input_flags(args, stack) for stack in STACKS}
    args.no_token_positional_embeddings = all(none for none, _ in flags.values())
    for stack, (_, learned) in flags.items():
        setattr(args, f"{stack}_learned_pos", learned)


def stack_args(args: Any, stack: str) -> Any:
    """The arguments ``stack`` is built from: a copy of the model's (a Namespace, or the
    ``TransformerConfig`` that fairseq's ``build_encoder`` passes, whose ``encoder`` and
    ``decoder`` parts are copied too), with ``pos_encoding`` the stack's encoding and the
    shared input flag the stack's own."""
    view = copy.deepcopy(args)
    view.pos_encoding = stack_names(args)[stack]
    view.no_token_positional_embeddings, learned = input_flags(args, stack)
    setattr(view, f"{stack}_learned_pos", learned)
    return view
