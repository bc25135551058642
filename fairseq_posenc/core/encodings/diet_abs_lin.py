"""``diet_abs_lin``: DIET-ABS on a Linformer (Chen et al. 2021b, DIET, section 3.4, eq. (4)).

Encoder self-attention, per head::

    A_ij = (X_i W_Q) ((E X)_j W_K)^T / sqrt(d_h) + (P_Q P_K^T)_ij,   z_i = sum_j p_ij (E X)_j W_V

``E: k x n`` projects the layer input along the sequence to ``k`` rows (Linformer, Wang et
al. 2020), so attention costs ``len x k`` instead of ``len x len``. ``P_Q: n x d_p`` holds the
query positions and ``P_K: k x d_p`` one row per projected key. ``k`` = ``--diet-abs-lin-k``
(default 32, the DIET GLUE setting), ``d_p`` = ``--diet-abs-lin-rank`` (default ``d_h``), ``n``
= ``--diet-abs-lin-max-len`` (default the stack's max positions); longer inputs are an error.

Choices the paper leaves open, following Linformer's defaults where it has them:

* ``E`` acts on the layer input ``X`` before ``W_K`` / ``W_V`` (eq. (4) writes ``(E X) W_K``),
  one ``E`` per layer shared by all heads and by keys and values (Linformer's "key-value
  sharing"; ``docs/conventions.md``, "Sharing across layers and heads"). Its columns are
  indexed by the position of each real token, padding contributes nothing, and a sequence
  shorter than ``n`` uses the first columns: a left-padded source is projected exactly as
  the same source alone. ``E`` starts Xavier-uniform with gain ``1/sqrt(2)``, as fairseq's
  Linformer example.
* ``P_Q``, ``P_K`` are shared as for ``diet_abs`` (``--diet-abs-lin-sharing``, default
  ``layer``); ``P_Q P_K^T`` is computed once per forward. They start as N(0, 0.02).

The decoder: a causal self-attention cannot project along time (``(E X)_j`` would mix future
tokens into every key), so decoder self-attention uses plain ``diet_abs`` (``P_Q P_K^T`` with
``P_K: n x d_p``) with the same rank, sharing and maximum length. Encoder-decoder attention
is stock, as for every encoding.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Mapping, Optional

import torch
from torch import Tensor, nn

from ..context import PositionContext
from .base import PositionEncoding, init_scalar_table, layers_with_encoding
from .diet_abs import DietAbs, Rank
from .kinds import Projection
from .options import MAX_LEN_HELP, Option, Sharing
from .registry import register_encoding


class LinTables(nn.Module):
    """``P_Q: H x n x d_p`` and ``P_K: H x k x d_p``; one per sharing unit."""

    def __init__(self, num_heads: int, max_len: int, k: int, rank: int) -> None:
        super().__init__()
        self.p_q = nn.Parameter(torch.empty(num_heads, max_len, rank))
        self.p_k = nn.Parameter(torch.empty(num_heads, k, rank))
        init_scalar_table(self.p_q)
        init_scalar_table(self.p_k)

    def product(self, ctx: PositionContext) -> Tensor:
        """``P_Q P_K^T``: ``H x n x k``, once per forward (content-free)."""
        return ctx.latest(self, "product", None,
                          lambda: torch.matmul(self.p_q, self.p_k.transpose(-1, -2)))


@register_encoding
class DietAbsLin(Projection):
    name = "diet_abs_lin"
    max_len_option = "diet_abs_lin_max_len"

    def __init__(
        self, *, num_heads: int, head_dim: int, max_positions: int,
        diet_abs_lin_k: Annotated[int, Option(
            "length k the encoder's keys and values are projected to (default 32, as DIET's "
            "GLUE runs)", minimum=1, hint="DIET uses k = 32.", metavar="K")] = 32,
        diet_abs_lin_rank: Rank = None,
        diet_abs_lin_max_len: Annotated[Optional[int], Option(MAX_LEN_HELP.format(
            "positions n of E and P_Q; longer inputs are an error"), minimum=1,
            metavar="N")] = None,
        diet_abs_lin_sharing: Annotated[Sharing, Option(
            "share P_Q, P_K across layers (default, as diet_abs), heads, or none; E is "
            "always one per layer")] = "layer",
        tables: Optional[LinTables] = None,
    ) -> None:
        """``tables``: ``P_Q, P_K`` shared with other layers (:meth:`build_stack`), else
        this layer's own."""
        super().__init__()
        max_len = diet_abs_lin_max_len or max_positions
        if tables is None:
            heads = 1 if diet_abs_lin_sharing == "head" else num_heads
            tables = LinTables(heads, max_len, diet_abs_lin_k, diet_abs_lin_rank or head_dim)
        self.tables = tables
        self.e = nn.Parameter(torch.empty(diet_abs_lin_k, max_len))
        nn.init.xavier_uniform_(self.e, gain=1 / math.sqrt(2))

    @classmethod
    def build_stack(cls, values: Mapping[str, Any], num_layers: int,
                    pos_layers: Optional[str] = None,
                    **structural: Any) -> list[Optional[PositionEncoding]]:
        """The encoder's projection per layer, ``P_Q, P_K`` shared as ``diet_abs_lin_sharing``
        says; the decoder's plain ``diet_abs`` (module docstring)."""
        if structural["causal"]:
            return DietAbs.build_stack(cls._decoder_values(values), num_layers, pos_layers,
                                       **structural)
        shared = None
        if values["diet_abs_lin_sharing"] == "layer":
            n = values["diet_abs_lin_max_len"] or structural["max_positions"]
            shared = LinTables(structural["num_heads"], n, values["diet_abs_lin_k"],
                               values["diet_abs_lin_rank"] or structural["head_dim"])
        return [cls.build({**values, "tables": shared}, **structural) if used else None
                for used in layers_with_encoding(pos_layers, cls, num_layers)]

    @classmethod
    def random_positions_refusal(cls, values) -> Optional[str]:
        return ("its encoder's keys and values are the input projected along the sequence "
                "(Linformer's E, a column per token position), not a term of positions: "
                "drawing the columns would change which keys a sentence has")

    @staticmethod
    def _decoder_values(values: Mapping[str, Any]) -> dict[str, Any]:
        """The ``diet_abs`` options the decoder is built with."""
        return {"diet_abs_rank": values["diet_abs_lin_rank"],
                "diet_abs_max_len": values["diet_abs_lin_max_len"],
                "diet_abs_sharing": values["diet_abs_lin_sharing"],
                "diet_abs_symmetric": False}

    def project_sequence(self, x: Tensor, key_padding_mask: Optional[Tensor],
                         ctx: PositionContext) -> Tensor:
        length = x.size(0)
        if key_padding_mask is None:
            return torch.matmul(self.e[:, :length].to(x.dtype), x.flatten(1)).view(
                -1, *x.shape[1:])
        positions = ctx.real_positions(key_padding_mask, length, x.device)  # (B, T)
        e = self.e.to(x.dtype)[:, positions]  # (k, B, T): column of each token's position
        e = e.masked_fill(key_padding_mask.to(torch.bool)[None], 0.0)
        return torch.einsum("kbt,tbc->kbc", e, x)

    def projected_bias(self, q_len: int, key_padding_mask: Optional[Tensor],
                       ctx: PositionContext) -> Tensor:
        product = self.tables.product(ctx)  # (H, n, k)
        if key_padding_mask is None:
            return product[:, :q_len]
        positions = ctx.real_positions(key_padding_mask, q_len, key_padding_mask.device)
        return product[:, positions].transpose(0, 1)  # (B, H, T, k)
