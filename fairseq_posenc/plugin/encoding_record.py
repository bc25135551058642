"""A model's record of its position encodings: what its arguments, and so every checkpoint
``fairseq-train`` saves of it, say about the encoding of each stack. Written in one place
(:func:`write`) and read in one place (:func:`stack_names`); ``docs/architecture.md``, "A
checkpoint's record of its position encodings", says the same for the reader of a checkpoint.

The record, as :func:`write` leaves it when a model is built (``configure_positions``, on
the arguments fairseq then saves as the checkpoint's ``cfg.model``):

* ``encoder_pos_encoding`` and ``decoder_pos_encoding``: each stack's encoding, always set;
* ``pos_encoding``: the encoding of both stacks where they have one, None for a pair
  (``ENCODER/DECODER``): a pair's record names no encoding that neither stack uses.

:func:`stack_names` reads each stack's encoding as its own entry, else ``pos_encoding``,
else ``sinusoidal`` (:data:`DEFAULT_ENCODING`). That reads every record there has been:

* a checkpoint written before the per-stack flags: ``pos_encoding`` alone;
* a pair written before this record: all three entries, ``pos_encoding`` the architecture's
  encoding (``sinusoidal`` for ``--arch transformer_tiny_sinusoidal --encoder-pos-encoding
  t5 --decoder-pos-encoding alibi``), which the stacks' own entries override;
* arguments as parsed, before the model is built: ``pos_encoding`` from ``--arch`` or
  ``--pos-encoding`` (None for ``transformer_posenc`` without the flag), a stack's entry
  where its flag is given.

fairseq runs the architecture function again on a checkpoint's saved arguments before it
builds the model. ``transformer_*_NAME``'s sets a pair's ``pos_encoding`` (None) to ``NAME``
there, which no stack reads (each has its own entry) and the build writes over; and it takes
a record of one encoding other than ``NAME`` in both stacks (:func:`one_encoding`) as it is.

A model that ``posenc-convert`` made from another checkpoint (:mod:`.convert`) records where
its encodings came from as one more entry, ``pos_converted_from`` (:data:`CONVERTED_FROM`,
written by :func:`write_conversion`, read by :func:`converted_from`): a dict of plain values,
the source file (``path``, ``sha256``), its model (``model``: ``transformer`` or
``transformer_posenc``; ``architecture``: its ``--arch``), its encodings (``encoding``, as the
tag names them: ``NAME`` or ``ENCODER/DECODER``), its ``updates``, and the ``seed`` that
initialised what the source lacked. No stack reads it; a model trained from the converted
checkpoint (``fairseq-train --finetune-from-model``) has its own arguments, without it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

#: The stacks of a translation model, in order.
STACKS = ("encoder", "decoder")
#: A model's encoding where neither ``--pos-encoding``, its stack's flag nor its
#: architecture names one.
DEFAULT_ENCODING = "sinusoidal"
#: The record's entries: the one for both stacks, then each stack's.
ENTRIES = ("pos_encoding", *(f"{stack}_pos_encoding" for stack in STACKS))
#: The entry of a converted model: what it was converted from.
CONVERTED_FROM = "pos_converted_from"
#: The keys of :data:`CONVERTED_FROM`'s dict, in the order the module docstring gives them.
CONVERSION_KEYS = ("path", "sha256", "model", "architecture", "encoding", "updates", "seed")


def default_encoding(args: Any) -> str:
    """The encoding of a stack that has no entry of its own: ``pos_encoding``, else
    :data:`DEFAULT_ENCODING`."""
    return getattr(args, "pos_encoding", None) or DEFAULT_ENCODING


def stack_names(args: Any) -> dict[str, str]:
    """Each stack's encoding name from a model's arguments (a checkpoint's saved ones of any
    age included): its own entry, else :func:`default_encoding`."""
    return {stack: getattr(args, f"{stack}_pos_encoding", None) or default_encoding(args)
            for stack in STACKS}


def has_record(args: Any) -> bool:
    """Whether ``args`` are a ``transformer_posenc`` model's: they hold an entry of the
    record (a stock fairseq model's hold none)."""
    return any(hasattr(args, entry) for entry in ENTRIES)


def one_encoding(args: Any) -> Optional[str]:
    """The encoding both stacks' own entries name where they are set and the same (a
    record of one encoding, or both stack flags given alike), else None."""
    names = {getattr(args, f"{stack}_pos_encoding", None) for stack in STACKS}
    return names.pop() if len(names) == 1 else None


def write(args: Any, names: Mapping[str, str]) -> None:
    """Record ``names`` (each stack's encoding) in ``args`` as the module docstring says."""
    for stack in STACKS:
        setattr(args, f"{stack}_pos_encoding", names[stack])
    shared = set(names[stack] for stack in STACKS)
    args.pos_encoding = shared.pop() if len(shared) == 1 else None


def write_conversion(args: Any, source: Mapping[str, Any]) -> None:
    """Record in ``args`` what the model was converted from: ``source`` holds exactly
    :data:`CONVERSION_KEYS`, plain values (a checkpoint loads with ``weights_only``)."""
    if set(source) != set(CONVERSION_KEYS):
        raise ValueError(f"a conversion's record holds {', '.join(CONVERSION_KEYS)}, not "
                         f"{', '.join(sorted(source))}")
    setattr(args, CONVERTED_FROM, {key: source[key] for key in CONVERSION_KEYS})


def converted_from(args: Any) -> Optional[dict[str, Any]]:
    """What the model of ``args`` was converted from (:func:`write_conversion`), or None
    for a model that was trained, not converted."""
    record = getattr(args, CONVERTED_FROM, None)
    return dict(record) if record is not None else None
