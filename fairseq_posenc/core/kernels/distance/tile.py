"""What the fused distance kernels do in one tile of queries by keys, in Triton.

Loading and storing tiles, the logits with the term read by distance (:func:`_scores`,
its type the kernels' ``TERM``: :class:`.term_types.Term`), attention dropout's mask drawn
from a seed and each pair's position (:func:`_kept`, written out by :func:`_keep_kernel`),
and the sums of a tile by clipped distance and along its diagonals. The kernels that use them
are in :mod:`.forward` and :mod:`.backward`.
"""

from __future__ import annotations

from .term_types import PROPERTIES, Term

try:  # triton comes with CUDA builds of torch; CPU-only installs may lack it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = tl = None

LOG2E = 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x * log2(e))


if triton is not None:
    _LOG2E = tl.constexpr(LOG2E)
    #: Each term type's properties, by value: a constexpr, so that Triton caches the
    #: kernels' binaries under it (their key holds the constexprs they read, not ``Term``).
    _TERM_PROPERTIES = tl.constexpr({int(term): {name: getattr(term, name)
                                                 for name in PROPERTIES} for term in Term})

    @triton.constexpr_function
    def reads(term, what):
        """At compile time: whether term type ``term`` (a :class:`.term_types.Term` value,
        the kernels' ``TERM``) has the property ``what`` of :class:`.term_types.Term` (one
        of :data:`.term_types.PROPERTIES`)."""
        return _TERM_PROPERTIES.value[term][what]

    @triton.jit
    def _dot(a, b, IEEE: tl.constexpr):
        # float32 inputs: exact products (the default would round them to tf32).
        if IEEE:
            c = tl.dot(a, b, input_precision="ieee")
        else:
            c = tl.dot(a, b)
        return c

    @triton.jit
    def _program(H, BLOCK: tl.constexpr):
        """This program's block of ``BLOCK`` indices (grid axis 0) and ``(b, h)`` (axis 1)."""
        pid = tl.program_id(0)
        bh = tl.program_id(1)
        return pid, pid * BLOCK + tl.arange(0, BLOCK), bh, bh // H, bh % H

    @triton.jit
    def _kept(seed, bh, rows, start_n, TQ, TK, P_DROP, BLOCK_N: tl.constexpr):
        """Attention dropout's mask for query ``rows`` and keys ``start_n + [0, BLOCK_N)``
        of ``(b, h)`` (``start_n`` a multiple of 4): True where the pair is kept.

        Philox (Salmon et al. 2011, ``tl.randint4x``) keyed by ``seed``: one draw of four
        numbers per query and four consecutive keys, at the 64-bit counter ``(bh * TQ +
        i) * ceil(TK / 4) + j // 4``, so that the forward and both backward kernels
        redraw the same mask whatever their tiles (FlashAttention's way, with four
        numbers per draw for a quarter of the integer work). A pair is kept where its
        number's top 24 bits, as a fraction of ``2^24``, are at least ``P_DROP``."""
        groups = start_n // 4 + tl.arange(0, BLOCK_N // 4)
        counter = (bh.to(tl.int64) * TQ + rows[:, None]) * ((TK + 3) // 4) + groups[None, :]
        r0, r1, r2, r3 = tl.randint4x(seed, counter)
        bits = tl.interleave(tl.interleave(r0, r2), tl.interleave(r1, r3))  # key j: r_{j % 4}
        fraction = (bits.to(tl.uint32, bitcast=True) >> 8).to(tl.float32) * (1.0 / 16777216)
        return fraction >= P_DROP

    @triton.jit
    def _keep_kernel(SEED, KEEP, TQ, TK, P_DROP, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
        """:func:`_kept` for every pair, into an int8 ``(B, H, TQ, TK)`` tensor."""
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        start_n = tl.program_id(1) * BLOCK_N
        cols = start_n + tl.arange(0, BLOCK_N)
        bh = tl.program_id(2)
        kept = _kept(tl.load(SEED), bh, rows, start_n, TQ, TK, P_DROP, BLOCK_N)
        tl.store(KEEP + (bh.to(tl.int64) * TQ + rows[:, None]) * TK + cols[None, :],
                 kept.to(tl.int8), mask=(rows < TQ)[:, None] & (cols < TK)[None, :])

    @triton.jit
    def _tile(ptr, b, h, sb, sh, st, sd, index, index_ok, dims, D: tl.constexpr):
        """``x[b, h, index, :D]`` as ``(len(index), BD)``, zeros where masked."""
        return tl.load(ptr + b * sb + h * sh + index[:, None] * st + dims[None, :] * sd,
                       mask=index_ok[:, None] & (dims[None, :] < D), other=0.0)

    @triton.jit
    def _tile_t(ptr, b, h, sb, sh, st, sd, index, index_ok, dims, D: tl.constexpr):
        """The transposed tile, ``(BD, len(index))``, loaded as such."""
        return tl.load(ptr + b * sb + h * sh + index[None, :] * st + dims[:, None] * sd,
                       mask=index_ok[None, :] & (dims[:, None] < D), other=0.0)

    @triton.jit
    def _store_tile(ptr, bh, length, index, index_ok, dims, D: tl.constexpr, x):
        """Into a contiguous ``(B, H, length, D)`` tensor."""
        tl.store(ptr + (bh * length + index[:, None]) * D + dims[None, :],
                 x.to(ptr.dtype.element_ty), mask=index_ok[:, None] & (dims[None, :] < D))

    @triton.jit
    def _scores(q, kt, table_row, key_row, i_abs, row_ok, cols, col_ok, pad_row, R_LO, R,
                TERM: tl.constexpr, HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr,
                IEEE: tl.constexpr):
        """For one tile: the logits ``(q k^T + t) * log2(e)`` (``(q k^T) * t * log2(e)``
        for a factor), -inf where masked; ``q k^T``; ``t``, the term of type ``TERM``;
        and the table column of each pair. ``table_row``: the table's start, or each
        query row's (:func:`_table_start`). A table per head or per row read by clipped
        distance: column ``clip(j - i, R_LO, R_LO + R - 1) - R_LO``. Rows over every
        distance (``Term.full``): read unclipped at ``j - i - R_LO`` (:func:`_full_row`),
        and with a key side (``Term.key_rows``) each key column's too (``key_row``,
        :func:`_key_rows_start`)."""
        FULL: tl.constexpr = reads(TERM, "full")
        r = cols[None, :] - i_abs[:, None]
        qk = _dot(q, kt, IEEE)
        if FULL:
            index = r - R_LO
            read = (r >= R_LO) & (r < R_LO + R)  # False only where causally masked
            term = tl.load(_full_row(table_row, i_abs, cols, R_LO),
                           mask=row_ok[:, None] & read, other=0.0).to(tl.float32)
            if reads(TERM, "key_rows"):
                term += tl.load(key_row + i_abs[:, None], mask=col_ok[None, :] & read,
                                other=0.0).to(tl.float32)
        else:
            index = tl.minimum(tl.maximum(r - R_LO, 0), R - 1)
            term = tl.load(table_row + index, mask=row_ok[:, None], other=0.0).to(tl.float32)
        if reads(TERM, "factor"):
            s = qk * term
        else:
            s = qk + term
        valid = row_ok[:, None] & col_ok[None, :]
        if HAS_PAD:
            pad = tl.load(pad_row + cols, mask=col_ok, other=1)
            valid = valid & (pad == 0)[None, :]
        if CAUSAL:
            valid = valid & (r <= 0)
        return tl.where(valid, s * _LOG2E, float("-inf")), qk, term, index

    @triton.jit
    def _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                     TERM: tl.constexpr):
        """Where the table of each query row starts: one per head, or one per row (at
        ``b * s_row_b + h * s_row_h + row * s_row_t``, distances contiguous)."""
        if reads(TERM, "per_row"):
            start = TABLE + b * s_row_b + h * s_row_h + rows[:, None] * s_row_t
        else:
            start = TABLE + h * s_table_h
        return start

    @triton.jit
    def _full_row(table_row, i_abs, cols, R_LO):
        """Pair ``(i, j)``'s entry of its query row's table, ``j - i - R_LO``, written so
        that Triton sees the addresses run along the keys: a clamp would hide it, and the
        dQ kernel's stores would not coalesce (``docs/decisions.md``, "Tables per row by
        distance")."""
        return table_row - R_LO - i_abs[:, None] + cols[None, :]

    @triton.jit
    def _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO, R,
                        TERM: tl.constexpr):
        """With a key side (``Term.key_rows``): each key column's table (laid out as the
        query rows', with ``s_key_h`` per head) stored with its distances reversed, at
        column ``R - 1 - (j - i - R_LO)``, less ``i`` (added by the reader), so that
        addresses run along the queries of a tile column."""
        if reads(TERM, "key_rows"):
            start = (KEY_TABLE + b * s_row_b + h * s_key_h + cols[None, :] * s_row_t
                     + (R - 1 + R_LO) - cols[None, :])
        else:
            start = KEY_TABLE
        return start

    @triton.jit
    def _clipped_sums(x, i_abs, start_n, R_LO, R, BLOCK_N: tl.constexpr):
        """``out[a, c] = sum_j x[a, j]`` over the tile's keys with ``clip(j - i_a, R_LO,
        R_LO + R - 1) - R_LO = c``, ``(BLOCK_M, BLOCK_N)`` (columns ``c < R <= BLOCK_N``):
        inside the clip range one key per ``c`` (a gather), its two ends masked sums."""
        c = tl.arange(0, BLOCK_N)
        col = i_abs[:, None] + R_LO + c[None, :] - start_n
        inside = (col >= 0) & (col < BLOCK_N) & (c > 0)[None, :] & (c < R - 1)[None, :]
        out = tl.where(inside, tl.gather(x, tl.minimum(tl.maximum(col, 0), BLOCK_N - 1), 1),
                       0.0)
        unclipped = start_n + c[None, :] - i_abs[:, None] - R_LO  # key c's column, unclipped
        low = tl.sum(tl.where(unclipped <= 0, x, 0.0), 1)
        high = tl.sum(tl.where(unclipped >= R - 1, x, 0.0), 1)
        out += tl.where((c == 0)[None, :], low[:, None], 0.0)
        return out + tl.where((c == R - 1)[None, :], high[:, None], 0.0)

    @triton.jit
    def _read_sums_grad(D_SUMS, bh, TQ, rows, row_ok, R, index):
        """``dSums[b, h, i, clip(j - i) - R_LO]`` for each pair of the tile."""
        return tl.load(D_SUMS + (bh * TQ + rows)[:, None] * R + index, mask=row_ok[:, None],
                       other=0.0)

    @triton.jit
    def _diagonal_sums(ds, HALF: tl.constexpr, BLOCK: tl.constexpr):
        """``w[c] = sum_a ds[a, a + c - (BLOCK - 1)]`` for ``c`` in ``HALF * BLOCK + [0,
        BLOCK)``: the sums along the diagonals of a square tile, half of them at a time
        (the gather's index has the tile's shape)."""
        a = tl.arange(0, BLOCK)
        c = HALF * BLOCK + tl.arange(0, BLOCK)
        col = c[None, :] - (BLOCK - 1) + a[:, None]
        inside = (col >= 0) & (col < BLOCK)
        skewed = tl.gather(ds, tl.minimum(tl.maximum(col, 0), BLOCK - 1), 1)
        return tl.sum(tl.where(inside, skewed, 0.0), 0)
