"""What every position encoding shares: where it acts, sharing across layers, caching.

An encoding acts either at the input (fairseq's own position embeddings; self-attention
stays stock) or inside self-attention, through hooks that
:class:`~fairseq_posenc.attention.PositionalMultiheadAttention` calls, in this order:

* :meth:`PositionEncoding.project_sequence` -- replace the keys' and values' input by a
  projection along the sequence (Linformer, ``diet_abs_lin``);
* :meth:`PositionEncoding.rotate_qk` -- transform queries and keys (RoPE);
* :attr:`PositionEncoding.content_scale` -- a constant on ``q_i.k_j / sqrt(d_h)`` (TUPE);
* :meth:`PositionEncoding.content_logits` -- replace ``q_i.k_j / sqrt(d_h)`` altogether
  (Huang et al.'s method 3);
* :meth:`PositionEncoding.logit_scale` -- a factor on the content logits (Huang 1-2);
* :meth:`PositionEncoding.logit_bias` -- a term added to the scaled logits ``e_ij``;
* :meth:`PositionEncoding.value_term` -- a term added to the attention output (only
  encodings that need the attention probabilities, e.g. Shaw's value table).

``--pos-layers`` (:func:`layers_with_encoding`) chooses the layers that get the encoding:
every layer, or the first only (AT5's translation setting).

Biases that do not depend on content are cached in a :class:`PositionMemo`: the stack
(encoder or decoder) opens one per forward, so a table shared by all layers is expanded
once per forward, and during incremental decoding the decoder keeps one per generated
sequence, so each step only slices a precomputed per-distance table.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, Callable, ClassVar, Iterator, Optional, TypeVar

import torch
from torch import Tensor, nn

from ..positions import (
    clipped_index,
    distance_range,
    expand_distance_bias,
    gather_absolute_pairs,
    real_positions,
    relative_positions,
)


V = TypeVar("V")


class PositionMemo:
    """Cache shared by the self-attention layers of one stack.

    ``store`` is ``None`` outside a forward (nothing is cached: e.g. when activation
    checkpointing recomputes a layer during backward), a fresh dict during a full forward,
    and the per-sequence dict kept in fairseq's ``incremental_state`` while decoding.
    """

    def __init__(self) -> None:
        self.store: Optional[dict[Any, Any]] = None
        self.incremental = False

    @contextlib.contextmanager
    def scope(self, store: Optional[dict[Any, Any]] = None) -> Iterator[None]:
        saved = self.store, self.incremental
        self.incremental = store is not None
        self.store = {} if store is None else store
        try:
            yield
        finally:
            self.store, self.incremental = saved

    def cached(self, key: Any, fits: Callable[[Any], bool], compute: Callable[[], V]) -> V:
        """The value stored under ``key`` if ``fits(value)``, else ``compute()`` (stored)."""
        hit = self.store.get(key) if self.store is not None else None
        if hit is not None and fits(hit):
            return hit
        value = compute()
        if self.store is not None:
            self.store[key] = value
        return value

    def real_positions(self, padding_mask: Optional[Tensor], length: int,
                       device: torch.device) -> Tensor:
        """:func:`~fairseq_posenc.positions.real_positions`, computed once per forward:
        every layer of a stack receives the same padding-mask tensor."""
        if padding_mask is None:
            return real_positions(None, length, device)
        return self.cached("real_positions", lambda hit: hit[0] is padding_mask,
                           lambda: (padding_mask, real_positions(padding_mask, length, device)))[1]

    def ahead(self, n: int) -> int:
        """How far to compute when ``n`` is needed. Decoding needs one more position per
        step, so it allocates ahead and the following steps only slice."""
        return 2 * n + 16 if self.incremental else n


class PositionEncoding(nn.Module):
    """Base class. Subclasses set ``name`` and implement the hooks they need."""

    name: ClassVar[str]
    #: True for encodings added to the input embeddings (self-attention untouched).
    at_input: ClassVar[bool] = False

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """Add this encoding's hyperparameters (flags prefixed with its name)."""

    @classmethod
    def check_args(cls, args: argparse.Namespace) -> None:
        """Raise ``ValueError`` with a fix for hyperparameters that make no sense."""

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        """One module for all layers of a stack (True) or one per layer (False)."""
        return False

    @classmethod
    def build(
        cls,
        args: argparse.Namespace,
        *,
        num_heads: int,
        head_dim: int,
        causal: bool,
        max_positions: int,
    ) -> "PositionEncoding":
        raise NotImplementedError

    #: ``--pos-layers`` when the user gives none: "all", or "first" (AT5's MT setting).
    default_layers: ClassVar[str] = "all"

    @classmethod
    def build_stack(
        cls, args: argparse.Namespace, num_layers: int, **kwargs: Any
    ) -> list[Optional["PositionEncoding"]]:
        """The encoding of each layer (None: plain self-attention). Layer-shared encodings
        repeat the same module; ``--pos-layers first`` leaves every later layer plain."""
        used = layers_with_encoding(args, cls, num_layers)
        if cls.shares_layers(args):
            shared = cls.build(args, **kwargs)
            return [shared if used_here else None for used_here in used]
        return [cls.build(args, **kwargs) if used_here else None for used_here in used]

    #: Absolute encodings: the ``--<encoding>-max-len`` flag (see :func:`add_max_len_arg`)
    #: whose value, by default the stack's max positions, bounds the sequence length.
    max_len_flag: ClassVar[Optional[str]] = None

    @classmethod
    def max_length(cls, args: argparse.Namespace, max_positions: int) -> Optional[int]:
        """Longest sequence the encoding supports (absolute encodings), else None."""
        if cls.max_len_flag is None:
            return None
        return getattr(args, cls.max_len_flag[2:].replace("-", "_")) or max_positions

    @classmethod
    def max_length_flag(cls, args: argparse.Namespace) -> Optional[str]:
        """The encoding's own flag that sets :meth:`max_length`, if one was given."""
        flag = cls.max_len_flag
        return flag if flag and getattr(args, flag[2:].replace("-", "_")) else None

    # -- hooks called by the attention ------------------------------------------------
    has_value_term: bool = False
    #: Factor on ``q_i.k_j / sqrt(d_h)`` (TUPE's ``1/sqrt(2 d_h)`` is ``1/sqrt(2)``).
    content_scale: float = 1.0

    def project_sequence(self, x: Tensor, key_padding_mask: Optional[Tensor],
                         memo: PositionMemo) -> Optional[Tensor]:
        """``(k_len', B, C)``: the input that keys and values are computed from, projected
        along the sequence (padding excluded), or None to use ``x`` (``(T, B, C)``) itself.
        When projected, the keys have no padding and positions ``0..k_len'-1``."""
        return None

    def content_logits(self, q: Tensor, k: Tensor, q_offset: int,
                       memo: PositionMemo) -> Optional[Tensor]:
        """``(B, H, q_len, k_len)`` replacing ``q_i.k_j`` (``q`` already scaled), or None."""
        return None

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_offset: int, memo: PositionMemo
    ) -> tuple[Tensor, Tensor]:
        """Transform this step's queries and keys (both at positions ``q_offset + t``)
        before keys are cached; identity unless the encoding acts on q and k (RoPE)."""
        return q, k

    def logit_bias(
        self, q: Tensor, k: Tensor, q_offset: int, memo: PositionMemo,
        key_padding_mask: Optional[Tensor] = None,
    ) -> Optional[Tensor]:
        """Term added to ``e_ij`` (after scaling), broadcastable to ``(B, H, q_len, k_len)``.

        ``q`` is the already scaled query ``(B, H, q_len, d_h)``, ``k`` the keys
        ``(B, H, k_len, d_h)``; content-free encodings use only their lengths.
        ``key_padding_mask`` is the padding of the self-attention input, cache included
        (``(B, q_offset + q_len)``, True at padding, or None): what absolute encodings need
        to count positions over real tokens. It equals the keys' padding unless
        :meth:`project_sequence` replaced the keys.
        """
        return None

    def logit_scale(self, q_len: int, k_len: int, q_offset: int,
                    memo: PositionMemo) -> Optional[Tensor]:
        """Factor multiplying ``q_i.k_j / sqrt(d_h)``, broadcastable to ``(B, H, q_len,
        k_len)`` (Huang et al.'s multiplicative methods); None for additive encodings."""
        return None

    def value_term(self, probs: Tensor, q_offset: int, memo: PositionMemo) -> Tensor:
        """Term added to ``sum_j p_ij v_j``, shape ``(B, H, q_len, d_h)``."""
        raise NotImplementedError


class RelativeScalarBias(PositionEncoding):
    """``e_ij += b_h(r)``: a content-free scalar per head and relative distance ``r = j - i``.

    Subclasses implement :meth:`distance_bias` for a range of distances; this class
    expands it to the ``(H, q_len, k_len)`` bias and caches both the per-distance table and
    the expansion in the stack's :class:`PositionMemo`.
    """

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        """``(heads, r_hi - r_lo + 1)``: the bias of every distance in ``[r_lo, r_hi]``."""
        raise NotImplementedError

    def _per_distance(self, r_lo: int, r_hi: int, memo: PositionMemo) -> tuple[Tensor, int]:
        def compute() -> tuple[Tensor, int, int]:
            lo, hi = -memo.ahead(-r_lo), (memo.ahead(r_hi) if r_hi > 0 else r_hi)
            return self.distance_bias(lo, hi), lo, hi

        table, lo, _ = memo.cached((id(self), "per_distance"),
                                   lambda hit: hit[1] <= r_lo and hit[2] >= r_hi, compute)
        return table, lo

    #: True: the table multiplies the logits (logit_scale) instead of adding to them.
    multiplicative: ClassVar[bool] = False

    def logit_bias(
        self, q: Tensor, k: Tensor, q_offset: int, memo: PositionMemo,
        key_padding_mask: Optional[Tensor] = None,
    ) -> Optional[Tensor]:
        if self.multiplicative:
            return None
        return self._expanded(q.size(-2), k.size(-2), q_offset, memo)

    def logit_scale(self, q_len: int, k_len: int, q_offset: int,
                    memo: PositionMemo) -> Optional[Tensor]:
        return self._expanded(q_len, k_len, q_offset, memo) if self.multiplicative else None

    def _expanded(self, q_len: int, k_len: int, q_offset: int, memo: PositionMemo) -> Tensor:
        def compute() -> Tensor:
            table, r_lo = self._per_distance(*distance_range(q_len, k_len, q_offset), memo)
            return expand_distance_bias(table, r_lo, q_len, k_len, q_offset)

        if memo.incremental:  # one row per step: a slice, not worth keeping
            return compute()
        return memo.cached((id(self), q_len, k_len, q_offset), lambda hit: True, compute)


def clipped_distance_index(
    q_len: int, k_len: int, q_offset: int, r_lo: int, r_hi: int, memo: PositionMemo,
    device: torch.device,
) -> Tensor:
    """``clip(j - i, r_lo, r_hi) - r_lo`` for every (i, j): the row of a per-distance table
    of vectors. Content-free and the same for every layer with the same clip range, so the
    latest one is kept in the memo."""
    shape = (q_len, k_len, q_offset)
    return memo.cached(
        ("clipped_distance_index", r_lo, r_hi),
        lambda hit: hit[0] == shape,
        lambda: (shape, clipped_index(relative_positions(q_len, k_len, q_offset, device),
                                      r_lo, r_hi)),
    )[1]


def absolute_pair_bias(owner: nn.Module, table: Tensor, q_len: int, k_len: int,
                       q_offset: int, key_padding_mask: Optional[Tensor],
                       memo: PositionMemo) -> Tensor:
    """Read an ``(H, n, n)`` table over absolute positions (``n >= k_len``) at the real
    positions of each row: ``(B or 1, H, q_len, k_len)``.

    Without padding the positions are the indices (a slice). With padding the gather is
    done once per forward for all layers that share ``owner`` (they all get the same mask
    tensor); during decoding it is one row per step, and nothing that depends on the batch
    is kept in the decoding memo (it is never reordered)."""
    if key_padding_mask is None:
        return table[:, q_offset:k_len, :k_len]
    positions = memo.real_positions(key_padding_mask, k_len, table.device)
    if memo.incremental:
        return gather_absolute_pairs(table, positions, q_offset)
    shape = (q_len, k_len, q_offset)
    return memo.cached(
        (id(owner), "absolute_pair_bias"),
        lambda hit: hit[0] is key_padding_mask and hit[1] == shape,
        lambda: (key_padding_mask, shape, gather_absolute_pairs(table, positions, q_offset)),
    )[2]


SHARING_CHOICES = ("none", "layer", "head")
LAYER_CHOICES = ("all", "first")


def layers_with_encoding(args: argparse.Namespace, encoding: type[PositionEncoding],
                         num_layers: int) -> list[bool]:
    """Which self-attention layers of a stack get the encoding (``--pos-layers``)."""
    choice = getattr(args, "pos_layers", None) or encoding.default_layers
    if choice not in LAYER_CHOICES:
        raise ValueError(f"--pos-layers must be one of {', '.join(LAYER_CHOICES)}, "
                         f"got {choice!r}")
    return [choice == "all" or i == 0 for i in range(num_layers)]


def check_positive(value: int, flag: str, hint: str) -> None:
    if value is None or int(value) <= 0:
        raise ValueError(f"{flag} must be a positive integer, got {value!r}. {hint}")


def add_max_len_arg(parser: argparse.ArgumentParser, encoding: str, what: str) -> None:
    """``--<encoding>-max-len N``, defaulting to the stack's --max-source/target-positions."""
    parser.add_argument(f"--{encoding.replace('_', '-')}-max-len", type=int, default=None,
                        metavar="N", help=f"{encoding}: {what} "
                        "(default: --max-source-positions / --max-target-positions)")


def check_optional_positive(args: argparse.Namespace, *dests: str) -> None:
    """Flags that default to None (derived value) must be positive when given."""
    for dest in dests:
        value = getattr(args, dest)
        if value is not None:
            check_positive(value, "--" + dest.replace("_", "-"), "Leave it unset for the default.")


def init_scalar_table(table: Tensor) -> None:
    """Scalar position tables start as N(0, 0.02): BERT's initializer range, which the
    DIET / REL-SCALAR experiments (BERT code base) use for every parameter."""
    nn.init.normal_(table, mean=0.0, std=0.02)
