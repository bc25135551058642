"""RoPE's frequencies rescaled at translation time, so that a model trained on sentences of
up to ``L`` tokens reads longer ones: the scaling chosen (:class:`RopeScaling`, by name from
the registry of :mod:`fairseq_posenc.core.rope_scaling_registry`; the built-in ones and
their papers: :mod:`fairseq_posenc.core.rope_scalings`), with its factor, the training
length and its options, checked.

Applied to ``rope`` and to ``xpos``'s rotation (whose decay ``zeta^((n - m)/gamma)`` is
not a frequency and stays as trained; no paper combines the two), and before
``--rope-fraction`` (pairs it leaves unrotated stay unrotated): the rotations name
``rope_scaling`` among their structural arguments, and no other encoding reads it. It
reaches the model through the plugin's tasks when a checkpoint is loaded to translate
(:mod:`fairseq_posenc.plugin.translation_scaling`), or through
:class:`fairseq_posenc.nn.PositionStack`'s keyword arguments (:func:`scaling_from_values`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch
from torch import Tensor

from . import rope_scalings  # noqa: F401  (registers the built-in scalings)
from .declarations import Declared, flag_name
from .rope_scaling_registry import (COMMON, ROPE_SCALINGS, RopeScalingSpec, Scaled, Unscaled,
                                    get_rope_scaling, length_readers, scaling_option_owners,
                                    scaling_options)

#: Names an argument in a message: its flag by default, its Python name in the torch API.
Label = Callable[[str], str]

#: The head dimension and base at which :attr:`RopeScaling.logit_scale` reads a scaling's
#: attention factor (which depends on neither: :mod:`.rope_scaling_registry`).
_PROBE = (64, 10000.0)


@dataclass(frozen=True)
class RopeScaling:
    """``--rope-scaling KIND --rope-scaling-factor FACTOR``; for a scaling that reads it
    (``yarn``, ``llama3``, ``dynamic``) the training length ``original_len`` (``L``, in
    tokens; None until known: :meth:`frequencies` needs it); ``options``: the values of
    the scaling's own options that were given, by name (``llama3``'s
    ``rope_scaling_low_freq_factor`` and ``rope_scaling_high_freq_factor``; None: 1 and
    4). Checked when made; a ``ValueError`` names the flag."""

    kind: str
    factor: float
    original_len: Optional[int] = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        check_scaling(self.kind, self.factor, self.original_len, self.options)
        object.__setattr__(self, "options", {name: value for name, value in
                                             self.options.items() if value is not None})

    @property
    def spec(self) -> RopeScalingSpec:
        return get_rope_scaling(self.kind)

    @property
    def per_sequence(self) -> bool:
        """True: the frequencies depend on each sequence's length bound
        (:meth:`sequence_frequencies`)."""
        return self.spec.per_sequence

    @property
    def option_values(self) -> dict[str, Any]:
        """Every option of the scaling: those given, the others at their defaults."""
        return {**{o.name: o.default for o in self.spec.options}, **self.options}

    def scaled(self, head_dim: int, base: float, lengths: Optional[Tensor] = None) -> Scaled:
        """The scaling's frequencies and attention factor for RoPE of ``head_dim`` and
        ``base``, float64: for a ``per_sequence`` scaling, those of the length bounds
        ``lengths`` (``(B,)``: ``(B, d/2)`` on ``lengths``' device), or without them those
        of a sequence within the training length, RoPE's own."""
        spec = self.spec
        length = self._length() if spec.reads_length else None
        if not spec.per_sequence:
            return spec.function(Unscaled.of(head_dim, base), self.factor, length, None,
                                 **self.option_values)
        rope = Unscaled.of(head_dim, base, None if lengths is None else lengths.device)
        bounds = torch.tensor([length]) if lengths is None else lengths
        result = spec.function(rope, self.factor, length, bounds, **self.option_values)
        return result if lengths is not None else Scaled(rope.theta, result.attention_factor)

    def frequencies(self, head_dim: int, base: float) -> Tensor:
        """``theta'_i`` for the pairs ``i = 0 .. d/2 - 1``, float64 (a ``per_sequence``
        scaling: those of a sequence within the training length, RoPE's)."""
        return self.scaled(head_dim, base).frequencies

    def dynamic_frequencies(self, head_dim: int, base: float, lengths: Tensor) -> Tensor:
        """A ``per_sequence`` scaling's ``theta'_i`` for sequences of length bounds
        ``lengths`` (``(B,)``): ``(B, d/2)`` float64 on ``lengths``' device."""
        return self.scaled(head_dim, base, lengths).frequencies

    @property
    def logit_scale(self) -> float:
        """The factor on the logits (YaRN's ``1/t = (0.1 ln s + 1)^2``; 1 for most)."""
        return self.scaled(*_PROBE).attention_factor

    def _length(self) -> int:
        if self.original_len is None:
            raise ValueError(f"--rope-scaling {self.kind} needs the training length: give "
                             "--rope-scaling-original-len N (tokens with </s>)")
        return self.original_len


def check_scaling(kind: str, factor: float, original_len: Optional[int],
                  options: Mapping[str, Any], label: Label = flag_name) -> None:
    """``ValueError`` naming the argument (``label(name)``) for an unknown scaling, a factor
    below 1, a training length that is not positive or given to a scaling that reads none,
    an option of another scaling, or option values that the option or the scaling refuse
    (an option whose value is None is not given)."""
    options = {name: value for name, value in options.items() if value is not None}
    spec = ROPE_SCALINGS.get(kind)
    if spec is None:
        raise ValueError(f"{label('rope_scaling')} must be one of "
                         f"{', '.join(ROPE_SCALINGS)}, got {kind!r}")
    if not factor >= 1:
        raise ValueError(f"{label('rope_scaling_factor')} must be at least 1 (the new length "
                         f"over the training length), got {factor}")
    if spec.reads_length:
        if original_len is not None and original_len < 1:
            raise ValueError(f"{label('rope_scaling_original_len')} must be a positive number "
                             f"of tokens (the training length), got {original_len}")
    elif original_len is not None:
        raise ValueError(f"{label('rope_scaling_original_len')} is read by "
                         f"{label('rope_scaling')} {', '.join(length_readers())} only; "
                         f"{label('rope_scaling')} {kind} uses the factor alone: drop it")
    own = {option.name: option for option in spec.options}
    foreign = [name for name in options if name not in own]
    if foreign:
        owners = scaling_option_owners()
        readers = list(dict.fromkeys(n for name in foreign for n in owners.get(name, [])))
        unknown = [name for name in foreign if name not in owners]
        if unknown:
            raise ValueError(f"{', '.join(map(label, unknown))}: no RoPE scaling has such an "
                             f"option; {label('rope_scaling')} {kind}'s options: "
                             f"{', '.join(map(label, own)) or 'none'}")
        raise ValueError(f"{' and '.join(map(label, foreign))} are read by "
                         f"{label('rope_scaling')} {', '.join(readers)} only; drop them from "
                         f"{label('rope_scaling')} {kind}")
    for name, value in options.items():
        own[name].check(value, label(name))
    if spec.check is not None:
        spec.check({**{name: option.default for name, option in own.items()}, **options})


def scaling_names() -> tuple[str, ...]:
    """Every argument a scaling may read, by name: the common ones (:data:`COMMON`) and
    every registered scaling's options."""
    return tuple(option.name for option in (*COMMON, *scaling_options()))


def scaling_from_values(values: Mapping[str, Any],
                        label: Label = flag_name) -> Optional[RopeScaling]:
    """The scaling that ``values`` ask for (names of :func:`scaling_names`; None or an
    option's default: not given, as a parser gives every flag; none asked: None),
    checked, naming each argument by ``label``; the training length may still be missing
    (a checkpoint may know it)."""
    defaults = {option.name: option.default for option in scaling_options()}
    given = {name: value for name, value in values.items() if value is not None
             and not (name in defaults and value == defaults[name])}
    kind = given.pop("rope_scaling", None)
    if kind is None:
        if given:
            names = " and ".join(map(label, given))
            raise ValueError(f"{names} go with {label('rope_scaling')} "
                             f"{{{','.join(ROPE_SCALINGS)}}}: add it, or drop them")
        return None
    kind = str(kind)
    factor = given.pop("rope_scaling_factor", None)
    if factor is None and kind in ROPE_SCALINGS:
        raise ValueError(f"{label('rope_scaling')} {kind} needs "
                         f"{label('rope_scaling_factor')} S: the new length over the training "
                         "length, at least 1")
    original_len = given.pop("rope_scaling_original_len", None)
    check_scaling(kind, factor, original_len, given, label)
    return RopeScaling(kind, float(factor), original_len, given)


__all__ = ["Declared", "Label", "RopeScaling", "check_scaling", "scaling_from_values",
           "scaling_names"]
