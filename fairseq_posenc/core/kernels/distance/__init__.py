"""Fused attention with a term read by distance, and that term's gradient, in Triton.

``out = softmax(q k^T + b[h, j - (q_offset + i)] + mask) v`` (``q`` arrives scaled), for
the term types of :class:`.term_types.Term`:

* :func:`distance_attention` -- one table per head (or for all) over a range of distances,
  a summand (T5, DIET-REL, AT5, TUPE-R's buckets, the encoder's ALiBi) or, with
  ``factor``, a factor of ``q_i.k_j`` (Huang et al. 1 and 2);
* :func:`clipped_relative_attention` -- a table per query row read by clipped distance, and
  the probabilities summed by clipped distance (Shaw et al.'s key and value terms);
* :func:`distance_rows_attention` -- tables per query row and key column that are products
  ``x A``, one column per distance (Transformer-XL's ``q_i.W_R R_{i-j}``, Huang et al.'s
  method 4), made as tensors.

As FlashAttention-2 (Dao 2023): tiles on chip, an online softmax, the backward recomputing
the probabilities from each row's log-sum-exp; no ``len x len`` tensor, no atomic adds
(the same bits every run), attention dropout drawn in the tiles (:func:`dropout_keep`).
By role: :mod:`.term_types` (the term types), :mod:`.tile`, :mod:`.forward`, :mod:`.backward`
(the Triton kernels), :mod:`.launch` (tiles, shapes, launches, dropout's seed),
:mod:`.tables` and :mod:`.rows` (the entry points). Compiled on CUDA, or in Triton's
interpreter (``TRITON_INTERPRET=1`` before import: ``tests/support/interpreted.py``).
``docs/architecture.md``, ``docs/decisions.md``.
"""

from __future__ import annotations

from .launch import Tiles, dropout_keep, dropout_seed
from .rows import distance_rows_attention
from .tables import clipped_relative_attention, clipped_rows_fit, distance_attention
from .term_types import Term

__all__ = ["Term", "Tiles", "clipped_relative_attention", "clipped_rows_fit",
           "distance_attention", "distance_rows_attention", "dropout_keep", "dropout_seed"]
