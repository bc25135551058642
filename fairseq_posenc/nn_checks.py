"""The argument checks of the torch-only API (:mod:`fairseq_posenc.nn`), in one place.

Each check runs before any work and raises a ``TypeError`` (a wrong type) or a
``ValueError`` (a wrong value or shape) that names the argument, what it got and what it
expects. Each returns what it checked (an ``int``, ``(batch, time)``) where the caller
uses it. A padding mask is ``(batch, time)`` of bool, True at padding (the convention of
``key_padding_mask``): a float or integer mask is refused because it means 1 = keep in
some libraries and 1 = padding (or ``-inf`` = padding) in others. A mask transposed to
``(time, batch)`` is refused by its shape, which cannot tell it apart when batch equals
time.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

import torch
from torch import Tensor


def count(name: str, value: Any, minimum: int = 1) -> int:
    """``value``: an integer (not a bool) of at least ``minimum``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        want = "a positive int" if minimum == 1 else f"an int of at least {minimum}"
        raise ValueError(f"{name} must be {want}, got {value}")
    return int(value)


def switch(name: str, value: Any) -> bool:
    """``value``: True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def heads(embed_dim: Any, num_heads: Any) -> int:
    """``embed_dim`` split into ``num_heads`` heads of equal width; the head width."""
    embed_dim, num_heads = count("embed_dim", embed_dim), count("num_heads", num_heads)
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim {embed_dim} is not a multiple of num_heads {num_heads}: "
                         "each head takes embed_dim // num_heads channels")
    return embed_dim // num_heads


def layer_index(layer: Any, num_layers: int) -> int:
    """``layer``: an index into a stack of ``num_layers`` layers, from 0."""
    layer = count("layer", layer, minimum=0)
    if layer >= num_layers:
        raise ValueError(f"layer {layer} is out of range: the PositionStack has {num_layers} "
                         f"layers, indexed 0 .. {num_layers - 1}")
    return layer


def sequence(x: Any, embed_dim: Optional[int] = None) -> tuple[int, int]:
    """``x``: a floating-point tensor ``(batch, time, ...)``; with ``embed_dim``, exactly
    ``(batch, time, embed_dim)`` and at least one position. Returns ``(batch, time)``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor (the output has its dtype), got "
                        f"{x.dtype}: pass the token embeddings, not token ids")
    if embed_dim is None:
        if x.dim() < 2:
            raise ValueError(f"x must be (batch, time, ...), got shape {tuple(x.shape)}")
    elif x.dim() != 3 or x.size(2) != embed_dim:
        raise ValueError(f"x must be (batch, time, embed_dim={embed_dim}), got shape "
                         f"{tuple(x.shape)}" + (": add a batch dimension (x[None])"
                                                 if x.dim() == 2 else ""))
    elif x.size(1) == 0:
        raise ValueError(f"x has no positions: shape {tuple(x.shape)}, time 0")
    return x.size(0), x.size(1)


def padding_mask(mask: Any, batch: int, time: int) -> None:
    """``mask``: None, or a bool tensor ``(batch, time)``, True at padding. A mask
    transposed to ``(time, batch)`` passes when batch equals time: no check can see it."""
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(f"padding_mask must be a bool tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"padding_mask must be a bool tensor, True at padding, got {mask.dtype}: a float "
            "or integer mask is ambiguous (1 = keep in some libraries, 1 = padding in "
            "others); pass mask.bool() if 1 marks padding, mask == 0 if 1 marks the tokens "
            "to keep")
    if tuple(mask.shape) != (batch, time):
        hint = (": a (time, batch) mask? pass padding_mask.t()"
                if tuple(mask.shape) == (time, batch) else "")
        raise ValueError(f"padding_mask must be (batch, time) = ({batch}, {time}) for x, "
                         f"got shape {tuple(mask.shape)}{hint}")


def cache_call(cache: Any, kind: type, causal: bool, batch: int) -> None:
    """``cache``: a ``kind`` (``DecodingCache``) given to a causal layer, holding as many
    sequences as ``x`` has rows (``cache.rows``, None while empty)."""
    if not isinstance(cache, kind):
        raise TypeError(f"cache must be a fairseq_posenc.nn.{kind.__name__}, got "
                        f"{type(cache).__name__}")
    if not causal:
        raise ValueError("cache is for causal incremental decoding, and this layer has "
                         "causal=False: call it without cache (it reads the whole sequence "
                         "at once)")
    if cache.rows is not None and cache.rows != batch:
        raise ValueError(f"x has batch {batch} but the DecodingCache holds {cache.rows} "
                         "sequences: after cache.reorder(order), the next step's x has one "
                         "row per entry of order")


def reorder_index(order: Any, rows: Optional[int]) -> None:
    """``order``: a 1-D integer tensor of rows of a cache of ``rows`` sequences (None:
    empty, any index); rows in range where it is on the CPU."""
    if not isinstance(order, Tensor):
        raise TypeError(f"order must be a tensor of row indices, got {type(order).__name__}")
    if order.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"order must be an integer (int64) tensor of row indices, got "
                        f"{order.dtype}")
    if order.dim() != 1:
        raise ValueError(f"order must be 1-D, one row index per sequence kept, got shape "
                         f"{tuple(order.shape)}")
    # on a GPU the range is left to index_select's own device-side check: reading it here
    # would make every beam step wait for the device
    if rows is not None and order.numel() and order.device.type == "cpu":
        low, high = int(order.min()), int(order.max())
        if low < 0 or high >= rows:
            raise ValueError(f"order holds row {low if low < 0 else high}, but the cache "
                             f"holds {rows} sequences (rows 0 .. {rows - 1})")
