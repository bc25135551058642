"""Options declared as a function's keyword arguments, each with a default and a type
annotation, and what comes of such a declaration: the option's flag, its check and its
error messages.

Two things declare options this way: an encoding's constructor
(:mod:`fairseq_posenc.core.encodings.options`, which says which of its arguments are
options) and a RoPE scaling's function (:mod:`fairseq_posenc.core.rope_scaling_registry`).
An option's annotation is ``int``, ``float``, ``str``, ``bool`` (a switch, off by default),
``Optional[...]`` of one of these (None: a default the code derives) or a ``Literal`` of
strings (the choices), optionally wrapped in ``Annotated[..., Option(...)]`` for the help
text, a minimum and what to suggest. From the one declaration come the fairseq flags, the
torch API's keyword arguments, their checks and their messages, so that none is written
twice.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Optional, Union

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
    """One option as a function declares it. ``type``: ``int``, ``float`` or ``str``, or
    None for a switch (a ``bool``, off by default); ``choices``: a ``Literal``'s values;
    ``optional``: None is allowed (the default derived by the code that reads it)."""

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


#: What a declaration does with an annotation that is no option: None (it is no option, and
#: is skipped) or a ``TypeError``; called with the annotation, the default and ``where``.
OtherArgument = Callable[[Any, Any, str], None]


def refuse_other(hint: Any, default: Any, where: str) -> None:
    """The default for an annotation that is no option: a ``TypeError`` naming it."""
    raise TypeError(f"{where}: an option is an int, float, str, bool, Optional[...] of one "
                    f"or Literal[...] of strings; got {hint!r}")


def signature_options(function: Callable, owner: str,
                      parameters: Iterable[inspect.Parameter],
                      other: OtherArgument = refuse_other) -> tuple[Declared, ...]:
    """The options that ``parameters`` (of ``function``, named ``owner`` in messages)
    declare, in their order; ``other`` decides about an annotation of another type. A
    ``TypeError`` naming the argument for an option without a default or annotation, a
    switch that is on by default, or a default outside the option's type."""
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as error:  # an annotation that names something not importable
        raise TypeError(f"{owner}'s annotations cannot be read: {error}") from error
    options = []
    for param in parameters:
        where = f"{owner}'s argument {param.name!r}"
        if param.name not in hints:
            raise TypeError(f"{where} has no type annotation: annotate it (int, float, str, "
                            "bool, Optional[...] or Literal[...]) to make it an option")
        declared = declare(param.name, hints[param.name], param.default, where, other)
        if declared is not None:
            options.append(declared)
    return tuple(options)


def declare(name: str, hint: Any, default: Any, where: str,
            other: OtherArgument = refuse_other) -> Optional[Declared]:
    """The option ``name`` of annotation ``hint`` and ``default`` (None: no option, as
    ``other`` decides for an annotation of no option's type)."""
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
        other(hint, default, where)
        return None
    if default is inspect.Parameter.empty:
        raise TypeError(f"{where} is an option and needs a default")
    if hint is bool and default is not False:
        raise TypeError(f"{where} is a switch and must default to False (a flag turns it on)")
    declared = Declared(name, default, base, choices, optional, meta.help, meta.minimum,
                        meta.hint, meta.metavar)
    if not declared._has_type(default):
        raise TypeError(f"{where}: its default {default!r} is not {declared.want()}")
    return declared
