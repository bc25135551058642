"""Every position encoding of the package for any PyTorch model, in torch alone.

Importing this module loads no fairseq and none of the tools; the layers run the plugin's
planner and kernels (:mod:`fairseq_posenc.core.attention_core`), so their numbers are the
plugin's, on CPU or GPU.

* :class:`PositionalSelfAttention` -- self-attention with an attention-level encoding
  (``t5``, ``shaw``, ``rope``, ...; any ``--pos-encoding`` name), over ``(batch, time,
  embed_dim)``; the encoding's settings are keyword options under their Python names
  (``shaw_clip=16``), each with the plugin's default (:func:`encoding_options`).
* :class:`PositionStack` -- one stack's positions, shared by its layers as the plugin's
  ``PositionStack`` shares them (T5's one table per stack), and RoPE's scaling
  (``rope_scaling="yarn"``; yours: :func:`register_rope_scaling`).
* :class:`DecodingCache` -- incremental decoding: each layer's keys and values so far and
  the stack's position context; :meth:`DecodingCache.reorder` for beam search.
* :class:`PositionEmbedding` -- the input-level encodings (``sinusoidal``, ``learned``,
  ``none``, ``shape``), embeddings to add to the input: they are no term of attention.
* :func:`choose_kernels`; :func:`path_attention` and :func:`stickbreaking_attention`.
* Your own encoding: a class of a kind (:class:`DistanceBias`, :class:`PairBias`,
  :class:`LowRank`, :class:`Rotation`, :class:`InputEmbedding`), its options as keyword
  arguments, :func:`register_encoding` as its decorator (``docs/adding-an-encoding.md``).

Wrong arguments (sizes, shapes, a float padding mask, a cache of another batch) are a
``TypeError`` or ``ValueError`` that names them, before any work:
:mod:`fairseq_posenc.nn_checks`.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Optional, Union

import torch
from torch import Tensor, nn

from . import nn_checks as check
from .core.attention_core import AttachedPositions, Buffer, PositionalAttentionCore, cached_length
from .core.context import PositionContext, PositionScope
from .core.encodings import ENCODINGS
from .core.encodings.base import PositionEncoding
from .core.encodings.kinds import DistanceBias, InputEmbedding, LowRank, PairBias, Rotation
from .core.encodings.options import Option
from .core.encodings.path_products import path_attention  # re-exported (__all__)
from .core.encodings.stick_weights import stickbreaking_attention  # re-exported (__all__)
from .core.encodings.registry import option_values, register_encoding
from .core.kernel_choice import choose_kernels  # re-exported (__all__)
from .core.positions import real_positions
from .core.rope_scaling import RopeScaling, scaling_from_values, scaling_names
from .core.rope_scaling_registry import (Scaled, Unscaled,  # re-exported (__all__)
                                         register_rope_scaling)

__all__ = ["DecodingCache", "DistanceBias", "InputEmbedding", "LowRank", "Option", "PairBias",
           "PositionContext", "PositionEmbedding", "PositionStack", "PositionalSelfAttention",
           "Rotation", "Scaled", "Unscaled", "choose_kernels", "encoding_names",
           "encoding_options", "path_attention", "register_encoding", "register_rope_scaling",
           "stickbreaking_attention"]


def encoding_names(input_level: Optional[bool] = None) -> list[str]:
    """Every encoding's name; ``input_level`` True or False: those added to the input
    (:class:`PositionEmbedding`) or those inside attention (:class:`PositionalSelfAttention`)."""
    return sorted(name for name, cls in ENCODINGS.items()
                  if input_level is None or cls.at_input == input_level)


def encoding_options(encoding: str) -> dict[str, Any]:
    """The options of ``encoding`` with their defaults, by name (``--shaw-clip``:
    ``shaw_clip``): its constructor's keyword arguments beyond the structural ones
    (:mod:`fairseq_posenc.core.encodings.options`). None: derived from the layer
    (``max_len``, the head dimension)."""
    return {option.name: option.default for option in _encoding_class(encoding).options}


def _encoding_class(name: str) -> type[PositionEncoding]:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; choose one of: {', '.join(encoding_names())}")
    return ENCODINGS[name]


def _option_values(cls: type[PositionEncoding], options: dict[str, Any]) -> dict[str, Any]:
    """Every option of ``cls`` at its default but those in ``options``, each checked and
    named by its Python name; an option that is not the encoding's is a ``TypeError`` that
    names the encoding it belongs to, if any, and the valid ones."""
    return option_values(cls, options, labels=lambda option: option.name)


def _scaling(cls: type[PositionEncoding], options: dict[str, Any]) -> Optional[RopeScaling]:
    """The RoPE scaling that ``options`` ask for (its keyword arguments, taken out of
    ``options``), checked and named by their Python names; None: none asked. An encoding
    that reads no scaling (one that is no rotation of RoPE's frequencies) refuses one."""
    given = {name: options.pop(name) for name in scaling_names() if name in options}
    scaling = scaling_from_values(given, label=lambda name: name)
    if scaling is None:
        return None
    if "rope_scaling" not in cls.structural:
        readers = sorted(name for name, other in ENCODINGS.items()
                         if "rope_scaling" in other.structural)
        raise ValueError(f"rope_scaling rescales the frequencies of RoPE's rotation: "
                         f"{cls.name!r} has none; the encodings that read it: "
                         f"{', '.join(readers)}")
    if scaling.spec.reads_length and scaling.original_len is None:
        raise ValueError(f"rope_scaling={scaling.kind!r} needs the training length: give "
                         "rope_scaling_original_len=N (the longest training sequence)")
    return scaling


class PositionStack:
    """The position encoding of one stack of self-attention layers (an encoder's, a
    decoder's), built as the plugin builds a stack's: one module shared by all layers
    (``t5``, ``alibi``, ``rope``, ``tupe_a``, ...), or one per layer (``shaw``,
    ``diet_rel``, ...: :meth:`PositionEncoding.shares_layers`), and none in the layers
    that ``pos_layers="first"`` leaves plain (by default ``"first"`` for ``t5_nob``,
    ``at5``, ``at5_nob``, as AT5 translated; ``"all"`` for the others).

    Give it to each layer: ``PositionalSelfAttention(embed_dim, num_heads, stack,
    layer=i, causal=...)``. Each layer registers its encoding, so a shared module is a
    submodule of each (its parameters counted once by ``parameters()``). A forward of the
    whole stack inside :meth:`context` computes a content-free table shared by the layers
    (T5's bias by distance, TUPE's projections) once instead of once per layer.

    A rotation (``rope``, ``xpos``) takes a RoPE scaling by the plugin's flags' names:
    ``rope_scaling="yarn", rope_scaling_factor=4.0, rope_scaling_original_len=64``, and a
    scaling's options (``rope_scaling_low_freq_factor=``, ...): :func:`_scaling`."""

    def __init__(self, encoding: str, *, num_layers: int, embed_dim: int, num_heads: int,
                 causal: bool, max_len: int = 1024, pos_layers: Optional[str] = None,
                 **options: Any) -> None:
        head_dim = check.heads(embed_dim, num_heads)
        num_layers = check.count("num_layers", num_layers)
        max_len = check.count("max_len", max_len)
        causal = check.switch("causal", causal)
        cls = _encoding_class(encoding)
        if cls.at_input:
            raise ValueError(
                f"{encoding!r} is an input-level encoding, not a term of attention: add "
                f"fairseq_posenc.nn.PositionEmbedding({encoding!r}, embed_dim) to the input "
                "and use plain self-attention (PositionalSelfAttention with encoding=None). "
                f"Attention-level encodings: {', '.join(encoding_names(False))}")
        scaling = _scaling(cls, options)
        values = _option_values(cls, options)
        self.name, self.num_layers, self.causal = encoding, num_layers, causal
        self.embed_dim, self.num_heads, self.max_len = embed_dim, num_heads, max_len
        #: Per layer, its encoding (None: plain self-attention).
        self.encodings: list[Optional[PositionEncoding]] = cls.build_stack(
            values, num_layers, pos_layers, num_heads=num_heads, head_dim=head_dim,
            causal=causal, max_positions=max_len, rope_scaling=scaling)
        self.scope = PositionScope()

    def layer(self, index: int) -> AttachedPositions:
        """The terms of layer ``index``, read through the stack's scope."""
        return AttachedPositions.of(self.encodings[check.layer_index(index, self.num_layers)],
                                    self.scope)

    @contextlib.contextmanager
    def context(self, cache: Optional["DecodingCache"] = None) -> Iterator[PositionContext]:
        """One forward of the whole stack (a decoding step's: ``cache``'s context)."""
        with self.scope.open(None if cache is None else cache.context) as ctx:
            yield ctx


class DecodingCache:
    """What incremental decoding keeps between calls, for the layers it is passed to
    (give one cache to every layer of a stack, at every step): each layer's keys and
    values of every position so far and their padding (``(B, H, len, d_h)``, ``(B, len)``
    True at padding), and one :class:`PositionContext` for the sequence, in which the
    content-free tables are kept so that each step slices them. The context holds nothing
    that depends on the batch, so :meth:`reorder` leaves it as it is."""

    def __init__(self) -> None:
        self.context = PositionContext(incremental=True)
        self._buffers: dict[nn.Module, Buffer] = {}

    def buffer(self, layer: nn.Module) -> Buffer:
        """``layer``'s buffer (empty before its first call)."""
        return self._buffers.setdefault(layer, {})

    def __len__(self) -> int:
        """The number of positions cached (the position of the next step's token)."""
        return max((cached_length(b) for b in self._buffers.values()), default=0)

    @property
    def rows(self) -> Optional[int]:
        """The number of sequences cached (the batch of the next step); None while empty."""
        return next((b["prev_key"].size(0) for b in self._buffers.values()
                     if b.get("prev_key") is not None), None)

    def reorder(self, order: Tensor) -> "DecodingCache":
        """Keep the rows ``order`` (a 1-D integer tensor) of every buffer (beam search: the
        hypotheses that continue, each as often as it is extended; ``len(order)`` is the
        next step's batch); returns the cache."""
        check.reorder_index(order, self.rows)
        for buffer in self._buffers.values():
            for name, value in buffer.items():
                if value is not None:
                    buffer[name] = value.index_select(0, order.to(value.device))
        return self


def causal_mask(q_len: int, k_len: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``(q_len, k_len)``: ``-inf`` where key ``j`` comes after query ``i``, which sits at
    ``k_len - q_len + i``; 0 elsewhere."""
    return torch.full((q_len, k_len), float("-inf"), dtype=dtype,
                      device=device).triu(k_len - q_len + 1)


class PositionalSelfAttention(PositionalAttentionCore, nn.Module):
    """Multi-head self-attention with an attention-level position encoding: the plugin's
    computation (:class:`~fairseq_posenc.core.attention_core.PositionalAttentionCore`) with
    projections and attention dropout of its own.

    ``encoding``: an encoding's name (the layer builds it, with ``options`` and
    ``max_len``, the longest sequence an absolute table covers and the default of a
    relative table's clip), a :class:`PositionStack` (the layer reads its layer ``layer``;
    options belong to the stack), or None (plain self-attention). ``causal``: a decoder's
    self-attention (each position sees those before it; the encodings' causal forms).
    The projections are named and initialised as fairseq's ``MultiheadAttention``'s;
    ``low_rank_kernel`` and ``distance_kernel`` are the plugin's kernel switches."""

    def __init__(self, embed_dim: int, num_heads: int,
                 encoding: Union[str, PositionStack, None], *, causal: bool,
                 max_len: int = 1024, dropout: float = 0.0, layer: int = 0,
                 **options: Any) -> None:
        nn.Module.__init__(self)
        head_dim = check.heads(embed_dim, num_heads)
        causal, max_len = check.switch("causal", causal), check.count("max_len", max_len)
        if isinstance(encoding, PositionStack):
            if options:
                raise TypeError(f"options {sorted(options)} belong to the PositionStack")
            mismatch = {name: (mine, getattr(encoding, name))
                        for name, mine in (("embed_dim", embed_dim), ("num_heads", num_heads),
                                           ("causal", causal))
                        if getattr(encoding, name) != mine}
            if mismatch:
                raise ValueError(f"the layer and its PositionStack differ: {mismatch}")
            check.layer_index(layer, encoding.num_layers)
        elif encoding is not None:
            if layer != 0:
                raise ValueError(f"layer is an index into a PositionStack, got {layer!r} with "
                                 f"encoding {encoding!r}: build a PositionStack for several "
                                 "layers, or leave layer at 0")
            encoding = PositionStack(encoding, num_layers=1, embed_dim=embed_dim,
                                     num_heads=num_heads, causal=causal, max_len=max_len,
                                     **options)
        elif options:
            raise TypeError(f"plain self-attention has no options, got {sorted(options)}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = head_dim
        self.scaling = self.head_dim ** -0.5
        self.causal = causal
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim) for _ in range(4))
        for proj in (self.q_proj, self.k_proj, self.v_proj):  # fairseq's initialisation
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)
        self.dropout_module = nn.Dropout(dropout)
        self.low_rank_kernel = "auto"
        self.distance_kernel = "auto"
        positions = (AttachedPositions.of(None, PositionScope()) if encoding is None
                     else encoding.layer(layer))
        self._positions = positions
        #: The encoding, registered here (a shared one in every layer that reads it).
        self.position_encoding = positions.encoding

    def forward(self, x: Tensor, padding_mask: Optional[Tensor] = None,
                cache: Optional[DecodingCache] = None) -> Tensor:
        """``x``: ``(batch, time, embed_dim)``, floating point; ``padding_mask``: ``(batch,
        time)`` of bool, True at padding (``key_padding_mask``'s convention; a float or
        integer mask is refused, and a ``(time, batch)`` one too unless batch equals time,
        where its shape cannot tell). Returns ``(batch, time, embed_dim)``. With ``cache``
        (causal layers only), ``x`` holds the positions after those the cache holds (a
        decoding step: one), one row per sequence cached, which attend to the cached ones
        too, and the cache is extended in place; the outputs equal those of the full
        forward over the whole sequence. Wrong arguments are a ``TypeError`` or
        ``ValueError`` before any work (:mod:`fairseq_posenc.nn_checks`)."""
        batch, time = check.sequence(x, self.embed_dim)
        check.padding_mask(padding_mask, batch, time)
        if cache is not None:
            check.cache_call(cache, DecodingCache, self.causal, batch)
        query = x.transpose(0, 1)
        saved = None if cache is None else cache.buffer(self)
        q_len = x.size(1)
        mask = None
        if self.causal and q_len > 1:
            mask = causal_mask(q_len, cached_length(saved) + q_len, x.dtype, x.device)
        if cache is None or self.scope.context is cache.context:
            out = self.attend(query, padding_mask, mask, saved)[0]
        else:
            with self.scope.open(cache.context):
                out = self.attend(query, padding_mask, mask, saved)[0]
        return out.transpose(0, 1)


def sinusoid_table(length: int, dim: int) -> Tensor:
    """fairseq's sinusoids of positions ``0 .. length - 1``, ``(length, dim)``: sines then
    cosines of ``p w_i``, ``w_i = 10000^(-i/(h-1))``, ``h = dim // 2``; a zero column
    for an odd ``dim`` (``encodings/input.py`` says how this differs from the paper)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(length, dtype=torch.float)[:, None] * freq[None, :]
    table = torch.cat([angles.sin(), angles.cos()], dim=1)
    return torch.cat([table, table.new_zeros(length, 1)], dim=1) if dim % 2 else table


class PositionEmbedding(nn.Module):
    """An input-level encoding: embeddings of the positions to add to the input ``x``.

    ``sinusoidal`` (fairseq's sinusoids, :func:`sinusoid_table`), ``learned`` (a
    ``max_len x embed_dim`` table, N(0, 1/embed_dim) as fairseq's), ``none`` (zeros) and
    ``shape`` (the sinusoids at every position shifted by ``k ~ U{0..shape_max_shift}``
    per sequence in training, unshifted in evaluation). Positions count real tokens from
    0 (fairseq's embeddings read row ``padding_idx + 1 + p`` of their tables: a constant
    shift of the sinusoids)."""

    def __init__(self, encoding: str, embed_dim: int, max_len: int = 1024,
                 **options: Any) -> None:
        super().__init__()
        embed_dim, max_len = check.count("embed_dim", embed_dim), check.count("max_len", max_len)
        cls = _encoding_class(encoding)
        if not cls.at_input:
            raise ValueError(
                f"{encoding!r} is an attention-level encoding, no embedding of the input: "
                f"use PositionalSelfAttention(embed_dim, num_heads, {encoding!r}, causal=...). "
                f"Input-level encodings: {', '.join(encoding_names(True))}")
        values = _option_values(cls, options)
        self.encoding, self.embed_dim, self.max_len = encoding, embed_dim, max_len
        self.none, self.learned = cls.fairseq_flags  # (no embeddings, a learned table)
        self.draw = cls.position_draw(values, None)  # shape's shift in training, else None
        if not (self.none or self.learned) and embed_dim < 4:  # two frequencies at least
            raise ValueError(f"{encoding!r} needs embed_dim of at least 4 (sines and cosines "
                             f"of two frequencies or more), got {embed_dim}")
        if self.learned:
            self.weight = nn.Parameter(torch.empty(max_len, embed_dim))
            nn.init.normal_(self.weight, mean=0.0, std=embed_dim ** -0.5)
        elif not self.none:
            self.register_buffer("table", sinusoid_table(max_len, embed_dim), persistent=False)

    def forward(self, x: Tensor, padding_mask: Optional[Tensor] = None,
                offset: int = 0) -> Tensor:
        """The embeddings of the positions of ``x`` (``(batch, time, ...)``, floating
        point), in its dtype: ``(time, embed_dim)`` where every row has the positions
        ``offset .. offset + time - 1``, else ``(batch, time, embed_dim)`` (padding: the
        count of real tokens, zero rows at padding; shape's shift in training).
        ``padding_mask``: as :meth:`PositionalSelfAttention.forward`'s, ``(batch, time)``
        of bool, True at padding. ``offset``: the positions before ``x``, 0 or more, for a
        decoding step (``len(cache)``)."""
        batch, length = check.sequence(x)
        check.padding_mask(padding_mask, batch, length)
        offset = check.count("offset", offset, minimum=0)
        positions = offset + (real_positions(padding_mask, length, x.device)
                              if padding_mask is not None
                              else torch.arange(length, device=x.device))
        if self.training and self.draw is not None:
            mask = (padding_mask if padding_mask is not None
                    else torch.zeros(batch, length, dtype=torch.bool, device=x.device))
            positions = self.draw(mask)
        if self.none:
            return x.new_zeros(*positions.shape, self.embed_dim)
        largest = int(positions.max()) if positions.numel() else 0
        if self.learned:
            if largest >= self.max_len:
                raise ValueError(f"position {largest} is beyond the learned table's "
                                 f"{self.max_len} rows: build it with a larger max_len")
            rows = self.weight[positions]
        else:
            if largest >= self.table.size(0):  # sinusoids of any position
                self.table = sinusoid_table(2 * largest + 1, self.embed_dim).to(self.table)
            rows = self.table[positions]
        if padding_mask is not None:
            rows = rows.masked_fill(padding_mask[..., None], 0.0)
        return rows.to(x.dtype)
