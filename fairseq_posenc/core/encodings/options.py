"""An encoding's options, read from its constructor's signature.

An encoding's constructor takes the *structural* arguments by keyword (:data:`STRUCTURAL`:
the attention's sizes, whether it is causal, the stack's longest sequence, a translation-time
RoPE rescaling; it names those it reads, or takes ``**kwargs``) and declares its *options*
as its other keyword arguments, each with a default and a type annotation::

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
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from torch import nn

#: The arguments every encoding's constructor may take by keyword, given by the stack that
#: builds it: ``num_heads``, ``head_dim``, ``causal`` (a decoder's self-attention),
#: ``max_positions`` (the stack's longest sequence: the default size of a table over
#: positions or distances) and ``rope_scaling`` (a
#: :class:`~fairseq_posenc.core.rope_scaling.RopeScaling` set at translation time, or None).
STRUCTURAL = ("num_heads", "head_dim", "causal", "max_positions", "rope_scaling")

#: What to do about an option that has a derived default and was given a bad value.
UNSET_HINT = "Leave it unset for the default."

_PLAIN = (bool, int, float, str)


@dataclass(frozen=True)
class Option:
    """What an annotation adds to an option (``Annotated[int, Option(...)]``): its help
    text, the smallest value allowed (an option whose default is None is checked only when
    given), what the error message suggests beside the minimum, and the flag's metavar."""

    help: str = ""
    minimum: Optional[int] = None
    hint: str = ""
    metavar: Optional[str] = None


@dataclass(frozen=True)
class Declared:
    """One option as a constructor declares it. ``type``: ``int``, ``float`` or ``str``, or
    None for a switch (a ``bool``, off by default); ``choices``: a ``Literal``'s values;
    ``optional``: None is allowed (the default derived from the structural arguments)."""

    name: str
    default: Any
    type: Optional[type]
    choices: Optional[tuple[str, ...]] = None
    optional: bool = False
    help: str = ""
    minimum: Optional[int] = None
    hint: str = ""
    metavar: Optional[str] = None

    @property
    def flag(self) -> str:
        """The fairseq flag: ``--`` and the name with dashes."""
        return flag_name(self.name)

    def want(self) -> str:
        """What a value must be, in words."""
        if self.choices is not None:
            return f"one of {', '.join(map(repr, self.choices))}"
        if self.type is None:
            return "True or False"
        kind = {int: "an int", float: "a float"}.get(self.type, f"a {self.type.__name__}")
        return f"{kind} or None" if self.optional else kind

    def check(self, value: Any, label: Optional[str] = None) -> None:
        """``ValueError`` for a value of the wrong type, outside the choices or below the
        minimum, naming the option as ``label`` (its flag by default)."""
        label = label or self.flag
        if not self._has_type(value):
            raise ValueError(f"{label} must be {self.want()}, got {value!r}")
        if self.minimum is None or (value is None and self.default is None):
            return
        if value is None or value < self.minimum:
            hint = self.hint or (UNSET_HINT if self.default is None else "")
            need = ("a positive integer" if self.minimum == 1 and self.type is int
                    else f"at least {self.minimum}")
            raise ValueError(f"{label} must be {need}, got {value!r}. {hint}".rstrip())

    def _has_type(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.choices is not None:
            return value in self.choices
        if self.type is None:
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if self.type is float:
            return isinstance(value, (int, float))
        return isinstance(value, self.type)


def flag_name(option: str) -> str:
    return "--" + option.replace("_", "-")


def declared_options(cls: type) -> tuple[Declared, ...]:
    """The options ``cls.__init__`` declares, in its order. A ``TypeError`` naming the class
    for an option without a default or annotation, a switch that is on by default, or a
    default outside the option's type."""
    signature = inspect.signature(cls.__init__)
    try:
        hints = typing.get_type_hints(cls.__init__, include_extras=True)
    except Exception as error:  # an annotation that names something not importable
        raise TypeError(f"{cls.__qualname__}.__init__'s annotations cannot be read: "
                        f"{error}") from error
    options = []
    for param in list(signature.parameters.values())[1:]:
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL) or param.name in STRUCTURAL:
            continue
        where = f"{cls.__module__}.{cls.__qualname__}.__init__'s argument {param.name!r}"
        if param.name not in hints:
            raise TypeError(f"{where} has no type annotation: annotate it (int, float, str, "
                            "bool, Optional[...] or Literal[...]) to make it an option")
        declared = _declare(param.name, hints[param.name], param.default, where)
        if declared is not None:
            options.append(declared)
    return tuple(options)


def _declare(name: str, hint: Any, default: Any, where: str) -> Optional[Declared]:
    meta = Option()
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        meta = next((extra for extra in extras if isinstance(extra, Option)), meta)
    optional = False
    if typing.get_origin(hint) is Union:
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        optional = len(members) < len(typing.get_args(hint))
        hint = members[0] if len(members) == 1 else hint
    choices = None
    if typing.get_origin(hint) is Literal:
        choices = tuple(typing.get_args(hint))
        base: Optional[type] = str
    elif hint in _PLAIN:
        base = None if hint is bool else hint
    else:
        if not (isinstance(hint, type) and issubclass(hint, nn.Module)):
            raise TypeError(f"{where}: an option is an int, float, str, bool, Optional[...] "
                            f"of one or Literal[...] of strings, and a part that layers share "
                            f"(given by the class's build_stack) a torch module; got {hint!r}")
        if default is inspect.Parameter.empty:
            raise TypeError(f"{where} is a module the class's build_stack shares and needs a "
                            "default (None: the layer's own)")
        return None  # the class's own argument, given by its build_stack
    if default is inspect.Parameter.empty:
        raise TypeError(f"{where} is an option and needs a default")
    if hint is bool and default is not False:
        raise TypeError(f"{where} is a switch and must default to False (a flag turns it on)")
    declared = Declared(name, default, base, choices, optional, meta.help, meta.minimum,
                        meta.hint, meta.metavar)
    if not declared._has_type(default):
        raise TypeError(f"{where}: its default {default!r} is not {declared.want()}")
    return declared


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
