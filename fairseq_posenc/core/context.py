"""How a position term can run fused, and what one forward of a stack knows about positions.

The kinds of position term (what the attention reads to choose a term's exact
computation) are in :mod:`fairseq_posenc.core.encodings.kinds`; :class:`KernelFamily` is how a
term can run fused.

:class:`PositionContext` is built once per forward by each stack (encoder, decoder) and
read by every self-attention layer of that stack: whether the forward is incremental, the
source's segment ids, the positions chosen for each sequence where they are not its count of
real tokens (SHAPE's shift, ``--random-positions``' draw, in training), and a cache keyed
by owner (the module whose values it holds), so a content-free table shared by all layers
is computed once per forward. While generating,
the decoder keeps one context per generated sequence in fairseq's ``incremental_state``:
each step then slices tables computed for a window that grows geometrically
(:meth:`PositionContext.ahead`). Nothing that depends on the batch is kept across decoding
steps, because beam search reorders the batch and never reorders the context.

:class:`PositionScope` is the stack's handle on the context of the forward in progress:
fairseq's layer ``forward`` has no argument for it, so the layers hold the scope.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Optional, TypeVar

import torch
from torch import Tensor

from .positions import distance_range, real_positions

V = TypeVar("V")


class KernelFamily(enum.Enum):
    """A family of fused kernels that computes a term without its ``len x len`` tensor
    (:class:`FusedKernel`). The Triton families run by default only once checked on the
    device and dtype at hand (:mod:`fairseq_posenc.core.kernels.self_check`)."""

    #: A table per head and distance added to the logits (``DISTANCE_BIAS``), in the
    #: fused distance kernel.
    DISTANCE = "distance"
    #: A table per head and distance multiplying ``q_i.k_j`` (``DISTANCE_SCALE``).
    DISTANCE_FACTOR = "distance_factor"
    #: Rows per query and clipped distance, a value table by clipped distance (Shaw).
    CLIPPED = "clipped"
    #: Products of the query or key with a vector per distance (Transformer-XL, Huang 4).
    ROWS = "rows"
    #: The rotation of queries and keys (RoPE).
    ROTARY = "rotary"
    #: Extra query and key dimensions in torch's fused attention (``LOW_RANK``).
    EXTRA_DIMENSIONS = "extra dimensions"
    #: A distance bias that equals extra dimensions under the causal mask (causal ALiBi),
    #: and runs as :attr:`DISTANCE` without it.
    CAUSAL_EXTRA_DIMENSIONS = "extra dimensions when causal"
    #: Differences of cumulative sums (``INPUT_GATES``) that are extra dimensions under the
    #: causal mask: ``c_i - c_j`` less the per-row ``c_i``.
    CAUSAL_SUMS = "cumulative sums as extra dimensions when causal"


#: The families that are Triton kernels of this package, each self-checked.
TRITON_FAMILIES = (KernelFamily.DISTANCE, KernelFamily.DISTANCE_FACTOR, KernelFamily.CLIPPED,
                   KernelFamily.ROWS, KernelFamily.ROTARY)


@dataclass(frozen=True)
class FusedKernel:
    """How a term can run fused: its kernel family, and for :attr:`KernelFamily.CLIPPED`
    the number of clipped distances, whose columns a tile of the kernel keeps."""

    family: KernelFamily
    clipped_rows: int = 0


@dataclass
class Window:
    """A table over a range of positions or distances: ``table[..., x - lo]`` for
    ``x`` in ``[lo, hi]`` (along ``dim``)."""

    table: Tensor
    lo: int
    hi: int
    dim: int = -1

    def covers(self, lo: int, hi: int) -> bool:
        return self.lo <= lo and self.hi >= hi

    def rows(self, lo: int, hi: int) -> Tensor:
        """``table`` restricted to ``[lo, hi]``."""
        return self.table.narrow(self.dim, lo - self.lo, hi - lo + 1)


def _same(a: Any, b: Any) -> bool:
    """Cache keys: tensors compare by identity (the same mask object), the rest by value.
    Called for every layer in every decoding step: identity first, no generator."""
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return False
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


@dataclass(eq=False)
class PositionContext:
    """Per-forward position facts of one stack, and its cache keyed by owner.

    ``incremental``: the context lives for a whole generated sequence (one decoding step
    per forward); ``segment_ids``: ``(B, T)`` segment of each source token, when the model
    uses segments; ``positions``: ``(B, T)`` the position of each token of the stack's
    input, chosen per sequence for a training forward (SHAPE's shift, ``--random-
    positions``' draw; padding 0), or None: the count of real tokens before it
    (:func:`~fairseq_posenc.core.positions.real_positions`). Every term reads these: absolute
    ones at them, relative ones at their differences. ``lengths``: below.
    """

    incremental: bool = False
    segment_ids: Optional[Tensor] = None
    positions: Optional[Tensor] = None
    #: ``(B,)`` each sequence's length bound, read by a term whose frequencies depend on it
    #: (RoPE's ``--rope-scaling dynamic``), or None. Set by the plugin's stacks for such a
    #: term only, and while decoding anew at every step (it depends on the batch).
    lengths: Optional[Tensor] = None
    _cache: dict[tuple[Hashable, str], Any] = field(default_factory=dict, repr=False)

    def ahead(self, n: int) -> int:
        """How far to compute when ``n`` is needed. Decoding needs one more position per
        step, so it allocates ahead and the following steps only slice: ``2 n + 64``, so
        that a sentence of up to 64 tokens computes each table once, at its first step,
        and a longer one a logarithmic number of times (``docs/decisions.md``, "Decoding
        steps")."""
        return 2 * n + 64 if self.incremental else n

    def window(self, owner: Hashable, what: str, lo: int, hi: int,
               compute: Callable[[int, int], Window]) -> Window:
        """A content-free table of ``owner`` covering ``[lo, hi]``. ``compute(lo', hi')``
        is asked for a range grown by :meth:`ahead` away from 0 (a bound at 0 both ways:
        decoding starts there, and distances grow down while positions grow up) and
        returns the window it made (it may clip it, e.g. at a table's last row); kept for
        the whole context."""
        hit: Optional[Window] = self._cache.get((owner, what))
        if hit is not None and hit.covers(lo, hi):
            return hit
        grown_lo = -self.ahead(-lo) if lo <= 0 else lo
        grown_hi = self.ahead(hi) if hi >= 0 else hi
        made = compute(grown_lo, grown_hi)
        self._cache[(owner, what)] = made
        return made

    def latest(self, owner: Hashable, what: str, key: Any, compute: Callable[[], V],
               batch_dependent: bool = False) -> V:
        """``compute()``, reused while ``key`` is the same (tensors: the same object).
        Values that depend on the batch are not kept while decoding (never reordered)."""
        if batch_dependent and self.incremental:
            return compute()
        hit = self._cache.get((owner, what))
        if hit is not None and _same(hit[0], key):
            return hit[1]
        value = compute()
        self._cache[(owner, what)] = (key, value)
        return value

    def real_positions(self, padding_mask: Optional[Tensor], length: int,
                       device: torch.device) -> Tensor:
        """:func:`~fairseq_posenc.core.positions.real_positions`, once per padding mask: every
        layer of a stack receives the same mask tensor; the chosen :attr:`positions`
        where there are."""
        if self.positions is not None:
            return self.positions
        if padding_mask is None:
            return real_positions(None, length, device)
        return self.latest(None, "real_positions", padding_mask,
                           lambda: real_positions(padding_mask, length, device),
                           batch_dependent=True)

    def distances(self, q_len: int, k_len: int, q_offset: int) -> Tensor:
        """``(B, 1, q_len, k_len)``: ``pos[j] - pos[q_offset + i]`` between the chosen
        :attr:`positions`, once per forward (the relative distance ``r = j - i`` of
        :func:`~fairseq_posenc.core.positions.relative_positions`, between chosen positions)."""
        positions = self.positions
        assert positions is not None, "no positions chosen: distances are j - i"

        def compute() -> Tensor:
            return (positions[:, None, :] - positions[:, q_offset:, None]).unsqueeze(1)

        return self.latest(None, "distances", (q_len, k_len, q_offset), compute,
                           batch_dependent=True)

    def distance_range(self, q_len: int, k_len: int, q_offset: int = 0) -> tuple[int, int]:
        """Smallest and largest ``r = j - i`` of a ``(q_len, k_len)`` attention: of
        :func:`~fairseq_posenc.core.positions.distance_range`, or, between chosen
        :attr:`positions`, ``-P .. P`` with ``P`` the largest chosen position (one
        host synchronisation per forward), so that a table over it is the same for every
        layer."""
        if self.positions is None:
            return distance_range(q_len, k_len, q_offset)
        largest = self.largest_position()
        return -largest, largest

    def largest_position(self) -> int:
        """The largest chosen position, once per forward (a host synchronisation)."""
        positions = self.positions
        assert positions is not None, "no positions chosen"
        return self.latest(None, "largest position", positions, lambda: int(positions.max()),
                           batch_dependent=True)


class PositionScope:
    """The context of the stack's forward in progress, shared by the stack's layers.

    Outside a forward (a layer called on its own, or recomputed by activation checkpointing
    during backward) :attr:`context` is a fresh context each time: nothing is reused."""

    def __init__(self) -> None:
        self._open: Optional[PositionContext] = None

    @property
    def context(self) -> PositionContext:
        return self._open if self._open is not None else PositionContext()

    @contextlib.contextmanager
    def open(self, context: Optional[PositionContext] = None) -> Iterator[PositionContext]:
        saved = self._open
        self._open = PositionContext() if context is None else context
        try:
            yield self._open
        finally:
            self._open = saved
