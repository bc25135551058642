"""An encoding's options, read from its constructor's signature.

An encoding's constructor takes the *structural* arguments by keyword (:data:`STRUCTURAL`:
the attention's sizes, whether it is causal, the stack's longest sequence; a class may
declare more, as RoPE's rotations declare their translation-time rescaling; it names those
it reads, or takes ``**kwargs``) and declares its *options* as its other keyword arguments,
each with a default and a type annotation (the machinery: :mod:`..declarations`)::

    def __init__(self, *, num_heads: int,
                 shaw_clip: Annotated[int, Option("clip distances to [-K, K]", minimum=1)] = 16,
                 shaw_no_value: bool = False) -> None:

An option's name is its flag's (``shaw_clip`` is ``--shaw-clip``); its annotation is
``int``, ``float``, ``str``, ``bool`` (a switch, off by default), ``Optional[...]`` of one of
these (None: a default derived from the structural arguments, e.g. the stack's longest
sequence) or a ``Literal`` of strings (the choices), optionally wrapped in ``Annotated[...,
Option(...)]`` for the help text, a minimum and what to suggest. A keyword argument of any
other type is a torch module that the class's own
:meth:`~.base.PositionEncoding.build_stack` shares between layers (no option; it needs a
default); anything else is refused.

From this one declaration come the torch API's keyword options
(:func:`fairseq_posenc.nn.encoding_options`), the fairseq flags the plugin adds
(:mod:`fairseq_posenc.plugin.position_args`), their checks and the message for an option of
another encoding; the command line is the plugin's alone.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from torch import nn

from ..declarations import UNSET_HINT, Declared, Option, flag_name, signature_options

__all__ = ["STRUCTURAL", "UNSET_HINT", "Declared", "Option", "declared_options", "flag_name"]

#: The arguments every encoding's constructor may take by keyword, given by the stack that
#: builds it: ``num_heads``, ``head_dim``, ``causal`` (a decoder's self-attention) and
#: ``max_positions`` (the stack's longest sequence: the default size of a table over
#: positions or distances). A class that reads more declares them
#: (:attr:`~.base.PositionEncoding.structural`: RoPE's ``rope_scaling``).
STRUCTURAL = ("num_heads", "head_dim", "causal", "max_positions")


def declared_options(cls: type) -> tuple[Declared, ...]:
    """The options ``cls.__init__`` declares, in its order (every keyword argument but the
    structural ones, ``getattr(cls, "structural", STRUCTURAL)``). A ``TypeError`` naming the
    class for an option without a default or annotation, a switch that is on by default, or
    a default outside the option's type."""
    structural = getattr(cls, "structural", STRUCTURAL)
    params = [param for param in list(inspect.signature(cls.__init__).parameters.values())[1:]
              if param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL)
              and param.name not in structural]
    return signature_options(cls.__init__, f"{cls.__module__}.{cls.__qualname__}.__init__",
                             params, _shared_part)


def _shared_part(hint: Any, default: Any, where: str) -> None:
    """A keyword argument that is no option: a torch module that the class's own
    ``build_stack`` shares between layers (it needs a default); anything else is refused."""
    if not (isinstance(hint, type) and issubclass(hint, nn.Module)):
        raise TypeError(f"{where}: an option is an int, float, str, bool, Optional[...] "
                        f"of one or Literal[...] of strings, and a part that layers share "
                        f"(given by the class's build_stack) a torch module; got {hint!r}")
    if default is inspect.Parameter.empty:
        raise TypeError(f"{where} is a module the class's build_stack shares and needs a "
                        "default (None: the layer's own)")


# --- options that several encodings have, each under its own prefix ----------------------

#: Tables shared across a stack's layers, across heads, or not at all (DIET, section 5).
Sharing = Literal["none", "layer", "head"]

#: ``<prefix>_max_len``: the rows of a table over positions or distances.
MAX_LEN_HELP = "{} (default: --max-source-positions / --max-target-positions)"
#: T5's buckets (``t5``, ``tupe_r``), formatted with who uses the defaults.
BUCKETS_HELP = "number of relative-position buckets (default 32, {})"
DISTANCE_HELP = "distances beyond this share the last bucket (default 128, {})"
#: Huang et al.'s ``huangN_clip``.
CLIP_HELP = ("clip relative distances to [-K, K] (default: no clip, a table entry per "
             "distance up to the max positions)")
