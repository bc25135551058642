"""Name -> RoPE scaling, filled by ``@register_rope_scaling`` (the five built-in ones in
:mod:`fairseq_posenc.core.rope_scalings`, and a user's from a ``--user-dir`` file or any
PyTorch code).

A scaling is one function: RoPE's unscaled frequencies (:class:`Unscaled`), the scale factor
``s``, the training length ``L`` (an int for a scaling registered with ``reads_length``,
else None) and the sequence's length bound (None, or for a scaling registered with
``per_sequence`` a ``(B,)`` tensor: one bound per sequence) in; the scaled frequencies and a
factor on the attention's logits out (:class:`Scaled`)::

    @register_rope_scaling("halved", reads_length=True)
    def halved(rope: Unscaled, factor: float, original_len: Optional[int],
               lengths: Optional[Tensor], *,
               halved_pairs: Annotated[int, Option("pairs left as trained", minimum=0)] = 2
               ) -> Scaled:
        ...

Its keyword-only arguments are its options, declared as an encoding's constructor declares
its options (:mod:`fairseq_posenc.core.declarations`): from them come the fairseq flags of
the plugin's translation tasks (``--halved-pairs``), the keyword arguments of
:class:`fairseq_posenc.nn.PositionStack` (``halved_pairs=``) and their checks. Name them
after the scaling: every scaling's options are flags of one parser. ``check`` is called
with the option values (by name, None where not given) for what their types cannot rule
out; it raises ``ValueError`` naming the flags.

The attention factor multiplies ``q.k / sqrt(d_h)`` for every head alike, so it depends on
the factor and the lengths, not on the head dimension or the base. The frequencies are
float64: RoPE computes its angles from them in float64 and rounds once.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Mapping, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from .declarations import Declared, Option, declare, signature_options

__all__ = ["COMMON", "INPUTS", "ROPE_SCALINGS", "RopeScalingSpec", "Scaled", "Unscaled",
           "get_rope_scaling", "length_readers", "register_rope_scaling", "scaling_help",
           "scaling_option_owners", "scaling_options"]


@dataclass(frozen=True)
class Unscaled:
    """RoPE's frequencies before a scaling: ``theta_i = base^(-exponent_i)``, ``exponent_i =
    2i / d_h`` for the pairs ``i = 0 .. d_h/2 - 1``, float64 on one device."""

    head_dim: int
    base: float
    exponent: Tensor
    theta: Tensor

    @classmethod
    def of(cls, head_dim: int, base: float,
           device: Optional[torch.device] = None) -> "Unscaled":
        exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim
        return cls(head_dim, base, exponent, base ** -exponent)


class Scaled(NamedTuple):
    """A scaling's result: the frequencies (``(d_h/2,)``; per sequence ``(B, d_h/2)``),
    float64, and the factor on the attention's logits (1: none)."""

    frequencies: Tensor
    attention_factor: float = 1.0


#: A scaling's function: ``(rope, factor, original_len, lengths, **options) -> Scaled``.
ScalingFunction = Callable[..., Scaled]


@dataclass(frozen=True)
class RopeScalingSpec:
    """One registered scaling: its name (``--rope-scaling NAME``), its function, its
    options, whether it reads the training length ``L`` (``--rope-scaling-original-len``)
    and the length bound of each sequence, and its check of the option values."""

    name: str
    function: ScalingFunction
    options: tuple[Declared, ...]
    reads_length: bool = False
    per_sequence: bool = False
    check: Optional[Callable[[Mapping[str, Any]], None]] = None
    help: str = ""


ROPE_SCALINGS: dict[str, RopeScalingSpec] = {}

#: The arguments every scaling shares, as flags of the plugin's translation tasks and keyword
#: arguments of :class:`fairseq_posenc.nn.PositionStack`: which scaling (its help lists the
#: registered ones: :func:`scaling_help`), its factor, the training length.
COMMON = (
    declare("rope_scaling", Optional[str], None, "rope_scaling"),
    declare("rope_scaling_factor", Annotated[Optional[float], Option(
        "with --rope-scaling: the scale factor s >= 1, the new length over the training "
        "length")], None, "rope_scaling_factor"),
    declare("rope_scaling_original_len", Optional[int], None, "rope_scaling_original_len"),
)
#: The scaling function's positional arguments, before its options.
INPUTS = ("rope", "factor", "original_len", "lengths")


def register_rope_scaling(name: str, *, reads_length: bool = False,
                          per_sequence: bool = False,
                          check: Optional[Callable[[Mapping[str, Any]], None]] = None,
                          help: str = "") -> Callable[[ScalingFunction], ScalingFunction]:
    """Function decorator: register the scaling ``name`` (a Python identifier; ``help``:
    what it is, in a few words, for ``--rope-scaling``'s help). A
    ``TypeError`` or ``ValueError`` naming the function for a name registered already, a
    function that does not take the four inputs (:data:`INPUTS`) positionally and its
    options by keyword only, an option of another scaling's name declared differently, or
    one named like a common flag; a ``per_sequence`` scaling reads the training length."""

    def register(function: ScalingFunction) -> ScalingFunction:
        where = f"{function.__module__}.{function.__qualname__}"
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"{where}: a RoPE scaling's name is a Python identifier (its "
                            f"--rope-scaling NAME), got {name!r}")
        if name in ROPE_SCALINGS:
            other = ROPE_SCALINGS[name].function
            raise ValueError(f"{where}: the RoPE scaling {name!r} is registered already, by "
                             f"{other.__module__}.{other.__qualname__}: choose another name")
        if per_sequence and not reads_length:
            raise ValueError(f"{where}: a per_sequence scaling compares each bound with the "
                             "training length: register it with reads_length=True too")
        spec = RopeScalingSpec(name, function, _options(function, where), reads_length,
                               per_sequence, check, help)
        ROPE_SCALINGS[name] = spec
        return function

    return register


def _options(function: ScalingFunction, where: str) -> tuple[Declared, ...]:
    params = list(inspect.signature(function).parameters.values())
    inputs = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = [p for p in params if p.kind is p.KEYWORD_ONLY]
    if len(inputs) != len(INPUTS) or len(inputs) + len(keywords) != len(params):
        raise TypeError(f"{where} takes ({', '.join(INPUTS)}) and then its options by keyword "
                        f"only (after a *), got ({', '.join(map(str, params))})")
    options = signature_options(function, where, keywords)
    common = {option.name for option in COMMON}
    for option in options:
        if option.name in common:
            raise ValueError(f"{where}: the option {option.name!r} is a flag every scaling "
                             f"shares ({option.flag}): name it after the scaling")
        for other in ROPE_SCALINGS.values():
            theirs = next((o for o in other.options if o.name == option.name), None)
            if theirs is not None and theirs != option:
                raise ValueError(f"{where}'s option {option.name!r} is also an option of the "
                                 f"RoPE scaling {other.name!r}, declared differently: rename "
                                 "it, or declare it the same way")
    return options


def get_rope_scaling(name: str) -> RopeScalingSpec:
    """The scaling ``name``; a ``ValueError`` listing the choices for another name."""
    try:
        return ROPE_SCALINGS[name]
    except KeyError:
        raise ValueError(f"--rope-scaling must be one of {', '.join(ROPE_SCALINGS)}, "
                         f"got {name!r}") from None


def length_readers() -> list[str]:
    """The scalings that read the training length (``--rope-scaling-original-len``)."""
    return [name for name, spec in ROPE_SCALINGS.items() if spec.reads_length]


def scaling_help(names: Optional[Sequence[str]] = None) -> str:
    """``--rope-scaling``'s help: each of the scalings ``names`` (None: every registered
    one) with its own."""
    specs = [ROPE_SCALINGS[name] for name in (names or ROPE_SCALINGS)]
    return ("translation only, --pos-encoding rope or xpos: rescale the rotation's "
            "frequencies for sentences longer than the training ones: " + ", ".join(
                f"{spec.name} ({spec.help})" if spec.help else spec.name for spec in specs))


def scaling_options(names: Optional[Sequence[str]] = None) -> tuple[Declared, ...]:
    """The options of the scalings ``names`` (None: every registered one), each once, in
    the order of registration."""
    specs = [ROPE_SCALINGS[name] for name in (names or ROPE_SCALINGS)]
    return tuple({option.name: option for spec in specs for option in spec.options}.values())


def scaling_option_owners() -> dict[str, list[str]]:
    """Each scaling option's name -> the scalings that declare it."""
    owners: dict[str, list[str]] = {}
    for spec in ROPE_SCALINGS.values():
        for option in spec.options:
            owners.setdefault(option.name, []).append(spec.name)
    return owners
