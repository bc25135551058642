"""The term types the fused distance kernels read: their one ``TERM`` argument.

Each kernel variant reads one term per pair of query ``i`` and key ``j`` at distance ``j -
i``, and what it loads, where, and which sums it keeps follow from the term's type
(:class:`Term`), not from independent switches: the handful of legal combinations is this
list. The other compile-time arguments vary independently of it: the padding mask,
causality, attention dropout, IEEE products in float32, and the tiles.
"""

from __future__ import annotations

import enum


class Term(enum.IntEnum):
    """What the kernels add to (or multiply) ``q.k``; the value is the kernels' ``TERM``."""

    BIAS = 0
    """``b[h, j - i]``: a table per head (or one for all) over a range of distances, added
    (T5, DIET-REL, AT5, TUPE-R's buckets, the encoder's ALiBi)."""

    FACTOR = 1
    """``(q.k) * b[h, j - i]``: the same table, a factor of ``q.k`` (Huang et al.'s
    methods 1 and 2)."""

    CLIPPED = 2
    """``rows[b, h, i, clip(j - i)]``: a table per query row read by clipped distance
    (Shaw et al.'s key term, ``q aK^T``)."""

    CLIPPED_SUMS = 3
    """:attr:`CLIPPED`, and the probabilities summed by clipped distance, a second output
    whose gradient the backward reads back (Shaw et al.'s value term)."""

    ROWS = 4
    """``(x_q A_q)[b, h, i, j - i]``: a table per query row over every distance, read
    unclipped (Transformer-XL's ``q_i.W_R R_{i-j}``)."""

    ROWS_BOTH = 5
    """:attr:`ROWS`, plus a table per key column, ``(x_k A_k)[b, h, j, j - i]``, laid out
    with its distances reversed (Huang et al.'s method 4)."""

    @property
    def factor(self) -> bool:
        """The table multiplies ``q.k`` (else it is added)."""
        return self is Term.FACTOR

    @property
    def per_row(self) -> bool:
        """A table per query row, ``(B, H, q_len, R)`` (else one per head, ``(H or 1, R)``)."""
        return self not in (Term.BIAS, Term.FACTOR)

    @property
    def sums(self) -> bool:
        """The probabilities summed by clipped distance are an output."""
        return self is Term.CLIPPED_SUMS

    @property
    def full(self) -> bool:
        """Per-row tables with a column for every distance, read unclipped: ``dS`` itself
        is their gradient, stored where each pair read them."""
        return self in (Term.ROWS, Term.ROWS_BOTH)

    @property
    def key_rows(self) -> bool:
        """A table per key column as well as per query row."""
        return self is Term.ROWS_BOTH


#: The properties of :class:`Term` the kernels derive what they read from (``tile.reads``).
PROPERTIES = ("factor", "per_row", "sums", "full", "key_rows")
