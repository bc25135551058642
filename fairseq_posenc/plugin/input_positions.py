"""fairseq's input position embedding read at positions chosen per sequence.

fairseq's ``SinusoidalPositionalEmbedding`` and ``LearnedPositionalEmbedding`` number the
real tokens of a row ``padding_idx + 1, padding_idx + 2, ..``; SHAPE's shift and
``--random-positions``' draw choose other positions for a training forward. The stack
replaces its ``embed_positions`` by :class:`InputPositions`, which holds the same table
(the learned one under the same state-dict key, ``embed_positions.weight``) and reads it at
row ``padding_idx + 1 + p`` for the position ``p`` of each real token: the positions of the
stack's :class:`~fairseq_posenc.core.context.PositionContext` where it has chosen ones, else the
count of real tokens before the token, exactly fairseq's rows (evaluation, decoding).
"""

from __future__ import annotations

from typing import Any, Optional

import torch.nn.functional as F
from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
from torch import Tensor, nn

from ..core.context import PositionScope
from ..core.positions import real_positions


class InputPositions(nn.Module):
    """``stock``'s table (sinusoidal or learned) read at the positions of ``scope``'s
    context; called as fairseq calls ``embed_positions``."""

    def __init__(self, stock: nn.Module, scope: PositionScope) -> None:
        super().__init__()
        self.padding_idx: int = stock.padding_idx
        self.max_positions: int = stock.max_positions
        self.learned = isinstance(stock, LearnedPositionalEmbedding)
        if self.learned:
            self.weight = stock.weight  # the same parameter and state-dict key as fairseq's
        elif isinstance(stock, SinusoidalPositionalEmbedding):
            self.embedding_dim = stock.embedding_dim
            self.register_buffer("weights", stock.weights, persistent=False)
        else:
            raise TypeError(f"no position table to read in {type(stock).__name__}")
        self._scope = scope  # not a module: the stack owns it

    def forward(self, tokens: Tensor, incremental_state: Optional[Any] = None,
                positions: Optional[Tensor] = None) -> Tensor:
        length = tokens.size(1)
        if incremental_state is not None:
            # a decoding step: the last token, at the prefix's length (as fairseq's modules)
            row = self.padding_idx + length
            return self.rows(tokens.new_full((1, 1), row), row + 1)
        padding = tokens.eq(self.padding_idx)
        chosen = self._scope.context.positions
        if chosen is None:  # fairseq's own rows
            chosen, end = real_positions(padding, length, tokens.device), length
        else:
            end = int(chosen.max()) + 1
        index = (chosen + self.padding_idx + 1).masked_fill(padding, self.padding_idx)
        return self.rows(index, self.padding_idx + 1 + end)

    def rows(self, index: Tensor, end: int) -> Tensor:
        """The table's rows ``index`` (fairseq's numbering, all below ``end``),
        ``(*index.shape, d)``."""
        if self.learned:
            return F.embedding(index, self.weight, self.padding_idx)
        if end > self.weights.size(0):  # sinusoids of any position, as fairseq's module
            self.weights = SinusoidalPositionalEmbedding.get_embedding(
                end, self.embedding_dim, self.padding_idx).to(self.weights)
        return self.weights.index_select(0, index.reshape(-1)).view(
            *index.shape, -1).detach()
