"""What each kind's methods return, checked against what the kind documents.

A method of an encoding of one's own that returns a tensor of another shape or dtype than
its kind documents (:mod:`.kinds`) would otherwise fail deep in the attention, in torch's
words (``The size of tensor a (5) must match the size of tensor b (6) at non-singleton
dimension 3``), or not fail at all: a bool mask returned as a bias adds 1 to the pairs it
allows, a table one distance short is sliced short. Each method's documented result is an
:class:`Output` here; the attention and the kinds' shared machinery check each result
where they receive it (:meth:`Output.check`), so that one the kind does not document is a
``ValueError`` that names the encoding's class, the method, what it returned and what was
expected, at the first call that returns it.

The check runs on every call, not once per instance: a result of the documented shape
passes with a comparison of its sizes with the expected ones (a loop over them where a
dimension may be 1 or left out) and one of its dtype, all of it host metadata (no device
synchronisation), which is what looking up a record of the calls checked already would
cost too; nothing is kept.

Not checked: what a term declaring a fused kernel adds for it (``distance_rows``,
``clipped_tables``, ``rows_by_key``: the built-in encodings' own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

#: The dtype a result must have: None, any floating-point dtype; a dtype, that one; a
#: tuple, one of those.
Dtypes = Union[None, torch.dtype, tuple[torch.dtype, ...]]

#: Why a term of the logits must be floating point.
ON_LOGITS = (": a term of the logits (a bool or integer mask would be read as the numbers 0 "
             "and 1, not as a mask)")


def term_name(term: Any) -> str:
    """``module.Class`` of ``term``, as a user's own code names it."""
    cls = type(term)
    return f"{cls.__module__}.{cls.__qualname__}"


def _documented_by(term: Any, method: str) -> str:
    """``Kind.method``: the first class among ``term``'s bases that defines ``method`` (its
    kind), whose docstring says what the result's dimensions are."""
    for cls in reversed(type(term).__mro__):
        if method in vars(cls):
            return f"{cls.__qualname__}.{method}"
    return method


@dataclass(frozen=True)
class Output:
    """The result a kind documents for ``method``: a tensor whose dimensions are named
    ``labels``; those in ``or_one`` may be 1 (broadcast), those in ``at_least`` may be
    longer; the first ``optional`` may be left out (broadcast too); of ``dtype`` (None: any
    floating-point dtype; ``why`` says what another would do)."""

    method: str
    labels: tuple[str, ...]
    or_one: frozenset[str] = frozenset()
    at_least: frozenset[str] = frozenset()
    optional: int = 0
    dtype: Dtypes = None
    why: str = ""
    #: What the value checked is, where the kind's machinery made it from the method's
    #: result (a table by distance expanded to the call's pairs), for the message.
    gives: Optional[str] = None

    def check(self, term: Any, value: Any, sizes: Sequence[Optional[int]],
              dtype: Dtypes = None, part: Optional[str] = None) -> Any:
        """``value``, what ``term``'s method returned; a ``ValueError`` unless it has the
        documented shape for this call's ``sizes`` (one per label; None: any size) and
        dtype (``dtype``: this call's, where the documented one depends on it). ``part``:
        which part of the method's result ``value`` is (``P_Q``, the queries), for the
        message."""
        want = self.dtype if dtype is None else dtype
        if isinstance(value, Tensor):
            if value.shape == sizes or self._admits(value.shape, sizes):
                if _dtype_ok(value, want):
                    return value
                raise ValueError(
                    f"{term_name(term)}.{self.method} {self._what(part or 'a tensor')} dtype "
                    f"{value.dtype}, expected {_dtype_text(want)}{self.why}")
            returned = f"{self._what(part)} shape {tuple(value.shape)}"
        else:
            returned = f"returned {type(value).__name__}, not a tensor"
        raise ValueError(f"{term_name(term)}.{self.method} {returned}, expected "
                         f"{self._shape_text(sizes)} ({_documented_by(term, self.method)} "
                         "says what each dimension is)")

    def _what(self, part: Optional[str]) -> str:
        """``returned P_Q of``, ``returned`` (``part`` None), or what the value ``gives``."""
        if self.gives is not None:
            return f"gives {self.gives} of"
        return "returned" if part is None else f"returned {part} of"

    def _admits(self, shape: torch.Size, sizes: Sequence[Optional[int]]) -> bool:
        left_out = len(sizes) - len(shape)
        if not 0 <= left_out <= self.optional:
            return False
        for label, want, size in zip(self.labels[left_out:], sizes[left_out:], shape):
            if not (want is None or size == want or (label in self.or_one and size == 1)
                    or (label in self.at_least and size >= want)):
                return False
        return True

    def _shape_text(self, sizes: Sequence[Optional[int]]) -> str:
        """The expected shape in words: ``(B=3 or 1, H=2, q_len=5, k_len=6) or without its
        first dimension``; ``broadcastable to (...)`` where every dimension may be 1 or
        left out."""
        if self.optional == len(self.labels) and self.or_one.issuperset(self.labels):
            return "broadcastable to (" + ", ".join(
                f"{label}={size}" for label, size in zip(self.labels, sizes)) + ")"
        dims = []
        for label, size in zip(self.labels, sizes):
            equals = " = " if " " in label else "="
            if size is None:
                dims.append(label)
            elif label in self.at_least:
                dims.append(f"{label} >= {size}")
            else:
                dims.append(f"{label}{equals}{size}" + (" or 1" if label in self.or_one else ""))
        text = f"({', '.join(dims)})"
        if self.optional == 1:
            text += " or without its first dimension"
        elif self.optional:
            text += f" or without up to {self.optional} of its first dimensions"
        return text


def _dtype_ok(value: Tensor, dtype: Dtypes) -> bool:
    if dtype is None:
        return value.is_floating_point()
    if isinstance(dtype, tuple):
        return value.dtype in dtype
    return value.dtype == dtype


def _dtype_text(dtype: Dtypes) -> str:
    if dtype is None:
        return "a floating-point dtype"
    if isinstance(dtype, tuple):
        return " or ".join(map(str, dtype))
    return str(dtype)


# -- each kind's methods, as :mod:`.kinds` documents them ------------------------------------

#: ``DistanceBias.distance_bias(r_lo, r_hi)``: a row per head, or one for all of them (the
#: layer's heads, checked on the term it gives), a column per distance.
DISTANCE_TABLE = Output("distance_bias", ("H", "r_hi - r_lo + 1"), why=ON_LOGITS)
#: ``DistanceBias``'s table expanded to the call's pairs (chosen positions: per sequence).
DISTANCE_TERM = Output("distance_bias", ("B", "H", "q_len", "k_len"),
                       or_one=frozenset({"B", "H"}), optional=1, why=ON_LOGITS,
                       gives="its table expanded to the call's pairs")
#: ``PairBias.pair_bias``.
PAIR_BIAS = Output("pair_bias", ("B", "H", "q_len", "k_len"), or_one=frozenset({"B", "H"}),
                   optional=1, why=ON_LOGITS)
#: ``LowRank.factors``: ``P_Q`` and ``P_K`` over ``n >= length`` positions, ``d_p`` the same.
FACTORS = Output("factors", ("H", "n", "d_p"), at_least=frozenset({"n"}))
#: ``LowRank``'s product read at the call's positions.
LOW_RANK_TERM = Output("factors", ("B", "H", "q_len", "k_len"), or_one=frozenset({"B", "H"}),
                       optional=1, gives="the product of its factors at the call's positions")
#: ``Rotation.rotate_qk``: the queries, then the keys, as given (dtype: as given).
ROTATED = Output("rotate_qk", ("B", "H", "len", "d_h"),
                 why=", that of the tensor it was given (the keys are cached, and both enter "
                     "one product)")
#: ``ContentBias.logit_bias``: broadcastable to the logits.
LOGIT_BIAS = Output("logit_bias", ("B", "H", "q_len", "k_len"),
                    or_one=frozenset({"B", "H", "q_len", "k_len"}), optional=4, why=ON_LOGITS)
#: ``ContentBias.value_term``.
VALUE_TERM = Output("value_term", ("B", "H", "q_len", "d_h"))
#: ``ContentLogits.content_logits``.
CONTENT_LOGITS = Output("content_logits", ("B", "H", "q_len", "k_len"))
#: ``Projection.project_sequence``: any number of projected positions.
PROJECTED_INPUT = Output("project_sequence", ("k_len'", "B", "C"))
#: ``Projection.projected_bias``.
PROJECTED_BIAS = Output("projected_bias", ("B", "H", "q_len", "k_len'"),
                        or_one=frozenset({"B", "H"}), optional=1, why=ON_LOGITS)
#: ``InputGates.log_gates``: ``G = H``, or ``2 H`` when bidirectional.
LOG_GATES = Output("log_gates", ("B", "G", "T"), dtype=(torch.float32, torch.float64),
                   why=": sums of log-gates over the whole sequence need float32 at least")

#: ``PathTransforms.transforms``: ``w`` of unit norm, then ``beta``.
TRANSFORM_VECTORS = Output("transforms", ("B", "H", "T", "d_h"),
                           gives="w, the transforms' vectors of unit norm (its first result)")
TRANSFORM_BETAS = Output("transforms", ("B", "H", "T"),
                         gives="beta, the transforms' factors (its second result)")
#: ``AttentionWeights.weights``: the weights (and what each row leaves, ``(B, H, q_len)``).
WEIGHTS = Output("weights", ("B", "H", "q_len", "k_len"),
                 gives="the attention weights (its first result)")
#: ``AttentionWeights.rest_term``.
REST_TERM = Output("rest_term", ("B", "H", "q_len", "d_h"))


def check_rotation(term: Any, q: Tensor, k: Tensor, rotated: Any) -> tuple[Tensor, Tensor]:
    """``rotate_qk``'s result, ``(q, k)`` transformed, each of the shape and dtype it was
    given (the keys are cached, and both enter one product); returns it."""
    if (isinstance(rotated, tuple) and len(rotated) == 2
            and isinstance(rotated[0], Tensor) and isinstance(rotated[1], Tensor)
            and rotated[0].shape == q.shape and rotated[1].shape == k.shape
            and rotated[0].dtype == q.dtype and rotated[1].dtype == k.dtype):
        return rotated
    if not (isinstance(rotated, tuple) and len(rotated) == 2):
        raise ValueError(f"{term_name(term)}.rotate_qk returned {type(rotated).__name__}, "
                         "expected a tuple (q, k): the queries and the keys, transformed")
    for given, value, name in ((q, rotated[0], "queries"), (k, rotated[1], "keys")):
        ROTATED.check(term, value, given.shape, dtype=given.dtype, part=f"the {name}")
    return rotated
