"""Fused attention with a term read by distance, and that term's gradient, in Triton.

``out = softmax(q k^T + b[h, j - (q_offset + i)] + mask) v`` (``q`` arrives scaled), for:

* :func:`distance_attention` -- one table per head (or for all) over a range of distances,
  a summand (``DISTANCE_BIAS``: T5, DIET-REL, AT5, TUPE-R's buckets, the encoder's ALiBi)
  or, with ``factor``, a factor of ``q_i.k_j`` (``DISTANCE_SCALE``: Huang et al. 1 and 2);
* :func:`clipped_relative_attention` -- a table per query row read by clipped distance, and
  the probabilities summed by clipped distance (Shaw et al.'s key and value terms);
* :func:`distance_rows_attention` -- tables per query row and key column that are products
  ``x A``, one column per distance (Transformer-XL's ``q_i.W_R R_{i-j}``, Huang et al.'s
  method 4): tensors, in bands of :data:`ROW_BAND` rows where bidirectional, or made in
  each tile with ``in_tile`` (off by default: :data:`ROWS_IN_TILE`).

As FlashAttention-2 (Dao 2023, Algorithms 1-2): tiles of queries and keys on chip, an online
softmax, the backward recomputing the probabilities from each row's log-sum-exp. The term is
read inside the tiles, padding is a ``(B, k_len)`` mask, causality a comparison: no ``len x
len`` tensor either way. ``dL/db[h, r] = sum_{j - i = r} dS[b, h, i, j]`` is summed along
each tile's diagonals and stored once per distance and query block, without atomic adds:
the same bits every run. Attention dropout is a Philox mask drawn in the tiles from a seed
and each pair's position, and drawn again in the backward (:func:`dropout_keep`). Beyond
FlashAttention-2: extra q.k dimensions (``d_qk != d_v``); a query with no key gets zeros.
Compiled on CUDA, or in Triton's interpreter (``TRITON_INTERPRET=1`` before import), as in
``tests/test_distance_kernel.py``. ``docs/architecture.md``, ``docs/decisions.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from . import on_device_of

try:  # triton comes with CUDA builds of torch; CPU-only installs may lack it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

LOG2E = 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x * log2(e))


if triton is not None:
    _LOG2E = tl.constexpr(LOG2E)

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
                Q_OFFSET, xq, AQ, h, sah, sad, sar, m_first, start_n, xkt, AK, sakh, sakd,
                sakr, HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, FACTOR: tl.constexpr,
                FULL: tl.constexpr, BAND: tl.constexpr, KEY_ROWS: tl.constexpr,
                IEEE: tl.constexpr,
                TILE_ROWS: tl.constexpr, D_X: tl.constexpr, BD_X: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """For one tile: the logits ``(q k^T + b[j - i]) * log2(e)`` (or ``(q k^T) *
        b[j - i] * log2(e)``), -inf where masked; ``q k^T``; ``b[j - i]``; and the table
        column of each pair, ``clip(j - i, R_LO, R_LO + R - 1) - R_LO``. ``table_row``:
        the table's start, or each query row's (a per-row table). ``FULL``: per-row tables
        that cover every distance, read unclipped, and with ``KEY_ROWS`` one per key
        column too (``key_row``, :func:`_key_rows_start`), made in bands of ``BAND``
        rows (or columns) over the distances each band meets (:data:`ROW_BAND`; 0: one
        table over all of them); with ``TILE_ROWS`` the query
        rows' term made in the tile from ``xq``, the block's ``x_q``, and ``A_q``
        (:func:`_rows_in_tile`; ``m_first``, ``start_n``: the tile's first query and key),
        and the key columns' from ``xkt``, the key tile's ``x_k^T``, and ``A_k``."""
        r = cols[None, :] - i_abs[:, None]
        qk = _dot(q, kt, IEEE)
        if FULL:
            index = r - R_LO
            if BAND > 0:  # every pair of the attention has its entry
                read = row_ok[:, None] & col_ok[None, :]
            else:
                read = (r >= R_LO) & (r < R_LO + R)  # False only where causally masked
            if TILE_ROWS:
                term = _rows_in_tile(xq, AQ, h, sah, sad, sar, m_first, start_n, R_LO, R,
                                     IEEE, D_X, BD_X, BLOCK_M, BLOCK_N)
            else:
                term = tl.load(_full_row(table_row, i_abs, cols, R_LO, Q_OFFSET, BAND),
                               mask=row_ok[:, None] & read, other=0.0).to(tl.float32)
            if KEY_ROWS and TILE_ROWS:
                term += _key_rows_in_tile(xkt, AK, h, sakh, sakd, sakr, m_first, start_n,
                                          R_LO, R, IEEE, D_X, BD_X, BLOCK_M, BLOCK_N)
            elif KEY_ROWS:
                term += tl.load(key_row + i_abs[:, None], mask=col_ok[None, :] & read,
                                other=0.0).to(tl.float32)
        else:
            index = tl.minimum(tl.maximum(r - R_LO, 0), R - 1)
            term = tl.load(table_row + index, mask=row_ok[:, None], other=0.0).to(tl.float32)
        if FACTOR:
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
    def _tile_distances(m_first, start_n, R_LO, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
        """For the tile of queries ``m_first + [0, BLOCK_M)`` and keys ``start_n + [0,
        BLOCK_N)``: the table columns ``j - i - R_LO`` it spans, ``BLOCK_M + BLOCK_N - 1``
        of them padded to a power of two (from the last query's first key), and where
        pair ``(a, n)`` finds its own among them, ``n - a + BLOCK_M - 1``."""
        if BLOCK_M > BLOCK_N:  # tile sides are powers of two
            w = tl.arange(0, 2 * BLOCK_M)
        else:
            w = tl.arange(0, 2 * BLOCK_N)
        col = start_n - m_first - (BLOCK_M - 1) - R_LO + w
        skew = tl.arange(0, BLOCK_N)[None, :] - tl.arange(0, BLOCK_M)[:, None] + (BLOCK_M - 1)
        return col, skew

    @triton.jit
    def _rows_in_tile(xq, AQ, h, sah, sad, sar, m_first, start_n, R_LO, R,
                      IEEE: tl.constexpr, D_X: tl.constexpr, BD_X: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``x_q[i] . A_q[h, :, j - i - R_LO]`` for the pairs of the tile of queries
        ``m_first + [0, BLOCK_M)`` and keys ``start_n + [0, BLOCK_N)``, made in the tile:
        the block's product with the ``BLOCK_M + BLOCK_N - 1`` columns its distances span
        (padded to a power of two), then each row skewed by a gather, pair ``(a, n)`` at
        column ``n - a + BLOCK_M - 1``. Columns outside ``[0, R)`` read as zeros: only
        masked pairs have them."""
        col, skew = _tile_distances(m_first, start_n, R_LO, BLOCK_M, BLOCK_N)
        d = tl.arange(0, BD_X)
        a = tl.load(AQ + h * sah + d[:, None] * sad + col[None, :] * sar,
                    mask=(d < D_X)[:, None] & ((col >= 0) & (col < R))[None, :], other=0.0)
        made = _dot(xq, a.to(xq.dtype), IEEE)
        return tl.gather(made, skew, 1)

    @triton.jit
    def _key_rows_in_tile(xkt, AK, h, sakh, sakd, sakr, m_first, start_n, R_LO, R,
                          IEEE: tl.constexpr, D_X: tl.constexpr, BD_X: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``x_k[j] . A_k[h, :, j - i - R_LO]`` for the tile's pairs, as
        :func:`_rows_in_tile` makes the query side's: the columns the tile spans times
        the key tile, then each key column skewed (pair ``(a, n)`` at row ``n - a +
        BLOCK_M - 1``). ``A_k`` arrives with its distances reversed (the layout of the key
        columns' table, :func:`_key_rows_start`): column ``c`` at ``R - 1 - c``."""
        col, skew = _tile_distances(m_first, start_n, R_LO, BLOCK_M, BLOCK_N)
        d = tl.arange(0, BD_X)
        at = tl.load(AK + h * sakh + (R - 1 - col)[:, None] * sakr + d[None, :] * sakd,
                     mask=((col >= 0) & (col < R))[:, None] & (d < D_X)[None, :], other=0.0)
        made = _dot(at.to(xkt.dtype), xkt, IEEE)
        return tl.gather(made, skew, 0)

    @triton.jit
    def _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                     PER_ROW: tl.constexpr):
        """Where the table of each query row starts: one per head, or one per row (at
        ``b * s_row_b + h * s_row_h + row * s_row_t``, distances contiguous)."""
        if PER_ROW:
            start = TABLE + b * s_row_b + h * s_row_h + rows[:, None] * s_row_t
        else:
            start = TABLE + h * s_table_h
        return start

    @triton.jit
    def _full_row(table_row, i_abs, cols, R_LO, Q_OFFSET, BAND: tl.constexpr):
        """Pair ``(i, j)``'s entry of its query row's table: ``j - i - R_LO``, or in bands
        of ``BAND`` rows ``j + BAND - 1 - t % BAND`` (``t = i - Q_OFFSET``, the row's
        index; :func:`_band_windows`), written so that Triton sees the addresses run
        along the keys: a clamp would hide it, and the dQ kernel's stores would not
        coalesce (``docs/decisions.md``, "Tables per row by distance")."""
        if BAND > 0:
            start = table_row + (BAND - 1) - ((i_abs - Q_OFFSET) % BAND)[:, None]
        else:
            start = table_row - R_LO - i_abs[:, None]
        return start + cols[None, :]

    @triton.jit
    def _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO, R,
                        Q_OFFSET, KEY_ROWS: tl.constexpr, BAND: tl.constexpr):
        """With ``KEY_ROWS``: each key column's table (laid out as the query rows', with
        ``s_key_h`` per head) stored with its distances reversed, at column ``R - 1 -
        (j - i - R_LO)``, or in bands of ``BAND`` columns ``i - Q_OFFSET + BAND - 1 - j %
        BAND``, less ``i`` (added by the reader), so that addresses run along the
        queries of a tile column."""
        if KEY_ROWS and BAND > 0:
            start = (KEY_TABLE + b * s_row_b + h * s_key_h + cols[None, :] * s_row_t
                     + (BAND - 1 - Q_OFFSET) - (cols % BAND)[None, :])
        elif KEY_ROWS:
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
    def _forward_kernel(
        Q, K, V, TABLE, KEY_TABLE, XQ, AQ, XK, AK, PAD, SEED, O, LSE, HIST_OUT,
        sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd,
        s_table_h, s_row_b, s_row_h, s_row_t, s_key_h, sxb, sxh, sxt, sxd, sah, sad, sar,
        skxb, skxh, skxt, skxd, sakh, sakd, sakr, H, TQ, TK, Q_OFFSET, R_LO, R,
        D_QK: tl.constexpr, D_V: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
        D_X: tl.constexpr, BD_X: tl.constexpr,
        HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, FACTOR: tl.constexpr,
        PER_ROW: tl.constexpr, KEY_ROWS: tl.constexpr, FULL: tl.constexpr,
        BAND: tl.constexpr, TILE_ROWS: tl.constexpr, HIST: tl.constexpr, IEEE: tl.constexpr,
        P_DROP, DROP_SCALE, DROPOUT: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        """One block of queries: ``O``, the log-sum-exp of each row, and with ``HIST`` the
        probabilities summed by clipped distance, ``(B, H, TQ, R)``."""
        pid_m, rows, bh, b, h = _program(H, BLOCK_M)
        row_ok = rows < TQ
        d_qk = tl.arange(0, BD_QK)
        d_v = tl.arange(0, BD_V)
        q = _tile(Q, b, h, sqb, sqh, sqt, sqd, rows, row_ok, d_qk, D_QK)
        xq = q  # read only with TILE_ROWS
        if TILE_ROWS:
            xq = _tile(XQ, b, h, sxb, sxh, sxt, sxd, rows, row_ok, tl.arange(0, BD_X), D_X)
        i_abs = rows + Q_OFFSET
        table_row = _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                 PER_ROW)
        pad_row = PAD + b * TK
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BD_V], tl.float32)
        hist = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if DROPOUT:
            seed = tl.load(SEED)
        hi = TK
        if CAUSAL:  # keys after the block's last query are masked for every row
            hi = tl.minimum(TK, (pid_m + 1) * BLOCK_M + Q_OFFSET)
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            col_ok = cols < TK
            kt = _tile_t(K, b, h, skb, skh, skt, skd, cols, col_ok, d_qk, D_QK)
            xkt = kt  # read only with TILE_ROWS and KEY_ROWS
            if TILE_ROWS and KEY_ROWS:
                xkt = _tile_t(XK, b, h, skxb, skxh, skxt, skxd, cols, col_ok,
                              tl.arange(0, BD_X), D_X)
            key_row = _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO, R,
                                      Q_OFFSET, KEY_ROWS, BAND)
            s, _, _, _ = _scores(q, kt, table_row, key_row, i_abs, row_ok, cols, col_ok,
                                 pad_row, R_LO, R, Q_OFFSET, xq, AQ, h, sah, sad, sar,
                                 pid_m * BLOCK_M + Q_OFFSET, start_n, xkt, AK, sakh, sakd,
                                 sakr, HAS_PAD, CAUSAL,
                                 FACTOR, FULL, BAND, KEY_ROWS, IEEE, TILE_ROWS, D_X, BD_X,
                                 BLOCK_M, BLOCK_N)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far
            p = tl.exp2(s - m_use[:, None])
            alpha = tl.exp2(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)  # the softmax's sum, before dropout
            if DROPOUT:
                p = tl.where(_kept(seed, bh, rows, start_n, TQ, TK, P_DROP, BLOCK_N),
                             p * DROP_SCALE, 0.0)
            v = _tile(V, b, h, svb, svh, svt, svd, cols, col_ok, d_v, D_V)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE)
            if HIST:
                hist = hist * alpha[:, None] + _clipped_sums(p, i_abs, start_n, R_LO, R,
                                                             BLOCK_N)
            m_i = m_new
        seen = l_i > 0.0  # False: every key masked; the row attends to nothing
        l_safe = tl.where(seen, l_i, 1.0)
        out = acc / l_safe[:, None]
        lse = tl.where(seen, m_i + tl.log2(l_safe), float("inf"))  # then P = 0 in backward
        _store_tile(O, bh, TQ, rows, row_ok, d_v, D_V, out)
        tl.store(LSE + bh * TQ + rows, lse, mask=row_ok)
        if HIST:
            c = tl.arange(0, BLOCK_N)
            tl.store(HIST_OUT + (bh * TQ + rows)[:, None] * R + c[None, :],
                     hist / l_safe[:, None], mask=row_ok[:, None] & (c < R)[None, :])

    @triton.jit
    def _delta_kernel(O, DO, DELTA, TQ, D_V: tl.constexpr, BD_V: tl.constexpr,
                      BLOCK_M: tl.constexpr):
        """``rowsum(dO * O)`` in float32 (both contiguous), without float32 copies."""
        _, rows, bh, _, _ = _program(1, BLOCK_M)
        row_ok = rows < TQ
        d_v = tl.arange(0, BD_V)
        o = _tile(O, bh, 0, TQ * D_V, 0, D_V, 1, rows, row_ok, d_v, D_V)
        do = _tile(DO, bh, 0, TQ * D_V, 0, D_V, 1, rows, row_ok, d_v, D_V)
        tl.store(DELTA + bh * TQ + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1),
                 mask=row_ok)

    @triton.jit
    def _backward_dkdv_kernel(
        Q, K, V, TABLE, KEY_TABLE, XQ, AQ, XK, AK, PAD, SEED, DO, LSE, DELTA, D_HIST, DK, DV,
        sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdb, sdh, sdt, sdd,
        s_table_h, s_row_b, s_row_h, s_row_t, s_key_h, sxb, sxh, sxt, sxd, sah, sad, sar,
        skxb, skxh, skxt, skxd, sakh, sakd, sakr, H, TQ, TK, Q_OFFSET, R_LO, R,
        D_QK: tl.constexpr, D_V: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
        D_X: tl.constexpr, BD_X: tl.constexpr,
        HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, FACTOR: tl.constexpr,
        PER_ROW: tl.constexpr, KEY_ROWS: tl.constexpr, FULL: tl.constexpr,
        BAND: tl.constexpr, TILE_ROWS: tl.constexpr, HIST: tl.constexpr, IEEE: tl.constexpr,
        P_DROP, DROP_SCALE, DROPOUT: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        """One block of keys: ``dV = P^T dO``, ``dK = dS^T Q`` over every query block."""
        pid_n, cols, bh, b, h = _program(H, BLOCK_N)
        col_ok = cols < TK
        d_qk = tl.arange(0, BD_QK)
        d_v = tl.arange(0, BD_V)
        kt = _tile_t(K, b, h, skb, skh, skt, skd, cols, col_ok, d_qk, D_QK)
        vt = _tile_t(V, b, h, svb, svh, svt, svd, cols, col_ok, d_v, D_V)
        xkt = kt  # read only with TILE_ROWS and KEY_ROWS
        if TILE_ROWS and KEY_ROWS:
            xkt = _tile_t(XK, b, h, skxb, skxh, skxt, skxd, cols, col_ok, tl.arange(0, BD_X),
                          D_X)
        pad_row = PAD + b * TK
        key_row = _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO, R,
                                      Q_OFFSET, KEY_ROWS, BAND)
        dk = tl.zeros([BLOCK_N, BD_QK], tl.float32)
        dv = tl.zeros([BLOCK_N, BD_V], tl.float32)
        if DROPOUT:
            seed = tl.load(SEED)
        lo = 0
        if CAUSAL:  # queries before the block's first key see none of it
            lo = (tl.maximum(pid_n * BLOCK_N - Q_OFFSET, 0) // BLOCK_M) * BLOCK_M
        for start_m in range(lo, TQ, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            row_ok = rows < TQ
            q = _tile(Q, b, h, sqb, sqh, sqt, sqd, rows, row_ok, d_qk, D_QK)
            xq = q  # read only with TILE_ROWS
            if TILE_ROWS:
                xq = _tile(XQ, b, h, sxb, sxh, sxt, sxd, rows, row_ok, tl.arange(0, BD_X),
                           D_X)
            do = _tile(DO, b, h, sdb, sdh, sdt, sdd, rows, row_ok, d_v, D_V)
            lse = tl.load(LSE + bh * TQ + rows, mask=row_ok, other=float("inf"))
            delta = tl.load(DELTA + bh * TQ + rows, mask=row_ok, other=0.0)
            table_row = _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                 PER_ROW)
            s, _, term, index = _scores(q, kt, table_row, key_row, rows + Q_OFFSET, row_ok,
                                        cols, col_ok, pad_row, R_LO, R, Q_OFFSET, xq, AQ, h,
                                        sah, sad, sar, start_m + Q_OFFSET, pid_n * BLOCK_N,
                                        xkt, AK, sakh, sakd, sakr, HAS_PAD, CAUSAL, FACTOR,
                                        FULL, BAND, KEY_ROWS, IEEE, TILE_ROWS, D_X,
                                        BD_X, BLOCK_M, BLOCK_N)
            p = tl.exp2(s - lse[:, None])
            if DROPOUT:  # the dropped probabilities' gradient is dP times the mask's scale
                z = tl.where(_kept(seed, bh, rows, pid_n * BLOCK_N, TQ, TK, P_DROP, BLOCK_N),
                             DROP_SCALE, 0.0)
                dv += _dot(tl.trans((p * z).to(do.dtype)), do, IEEE)
            else:
                dv += _dot(tl.trans(p.to(do.dtype)), do, IEEE)
            dp = _dot(do, vt, IEEE)
            if HIST:  # the probabilities' share of the histogram's gradient
                dp += _read_hist_grad(D_HIST, bh, TQ, rows, row_ok, R, index)
            if DROPOUT:
                dp = dp * z
            ds = p * (dp - delta[:, None])
            if FACTOR:  # the gradient of q k^T
                ds = ds * term
            dk += _dot(tl.trans(ds.to(q.dtype)), q, IEEE)
        _store_tile(DK, bh, TK, cols, col_ok, d_qk, D_QK, dk)
        _store_tile(DV, bh, TK, cols, col_ok, d_v, D_V, dv)

    @triton.jit
    def _read_hist_grad(D_HIST, bh, TQ, rows, row_ok, R, index):
        """``dHist[b, h, i, clip(j - i) - R_LO]`` for each pair of the tile."""
        return tl.load(D_HIST + (bh * TQ + rows)[:, None] * R + index, mask=row_ok[:, None],
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

    @triton.jit
    def _backward_dq_kernel(
        Q, K, V, TABLE, KEY_TABLE, XQ, AQ, XK, AK, PAD, SEED, DO, LSE, DELTA, D_HIST, DQ, DTABLE,
        D_KEY_TABLE,
        sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdb, sdh, sdt, sdd,
        s_table_h, s_row_b, s_row_h, s_row_t, s_key_h, sxb, sxh, sxt, sxd, sah, sad, sar,
        skxb, skxh, skxt, skxd, sakh, sakd, sakr, H, TQ, TK, Q_OFFSET, R_LO, R,
        D_QK: tl.constexpr, D_V: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
        D_X: tl.constexpr, BD_X: tl.constexpr,
        HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, FACTOR: tl.constexpr,
        PER_ROW: tl.constexpr, KEY_ROWS: tl.constexpr, FULL: tl.constexpr,
        BAND: tl.constexpr, TILE_ROWS: tl.constexpr, HIST: tl.constexpr, IEEE: tl.constexpr,
        P_DROP, DROP_SCALE, DROPOUT: tl.constexpr,
        TABLE_GRAD: tl.constexpr, BLOCK: tl.constexpr,
    ):
        """One block of queries: ``dQ = dS K``, and ``dS`` summed by distance into the
        table's gradient (square tiles): along the tiles' diagonals into this block's row
        of ``(B * H * query blocks, R)`` for a table per head, by clipped distance per row
        (``(B, H, TQ, R)``) for one per row. A table per row (and per key column) that
        covers every distance (``FULL``) has one pair per entry: ``dS`` itself, stored
        where the pair read it."""
        pid_m, rows, bh, b, h = _program(H, BLOCK)
        row_ok = rows < TQ
        d_qk = tl.arange(0, BD_QK)
        d_v = tl.arange(0, BD_V)
        q = _tile(Q, b, h, sqb, sqh, sqt, sqd, rows, row_ok, d_qk, D_QK)
        xq = q  # read only with TILE_ROWS
        if TILE_ROWS:
            xq = _tile(XQ, b, h, sxb, sxh, sxt, sxd, rows, row_ok, tl.arange(0, BD_X), D_X)
        do = _tile(DO, b, h, sdb, sdh, sdt, sdd, rows, row_ok, d_v, D_V)
        lse = tl.load(LSE + bh * TQ + rows, mask=row_ok, other=float("inf"))
        delta = tl.load(DELTA + bh * TQ + rows, mask=row_ok, other=0.0)
        i_abs = rows + Q_OFFSET
        table_row = _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                 PER_ROW)
        pad_row = PAD + b * TK
        dq = tl.zeros([BLOCK, BD_QK], tl.float32)
        d_rows = tl.zeros([BLOCK, BLOCK], tl.float32)  # a per-row table's gradient
        if DROPOUT:
            seed = tl.load(SEED)
        c = tl.arange(0, BLOCK)
        # A per-head table's gradient: this program's own row of (B * H * query blocks, R),
        # each distance stored once (``carry``: see below), summed in torch afterwards.
        d_table_row = DTABLE + (bh * tl.num_programs(0) + pid_m) * R
        carry = tl.zeros([BLOCK], tl.float32)
        carry_index = c  # where the carry goes: set by each key tile (there is at least one)
        hi = TK
        if CAUSAL:
            hi = tl.minimum(TK, (pid_m + 1) * BLOCK + Q_OFFSET)
        for start_n in range(0, hi, BLOCK):
            cols = start_n + tl.arange(0, BLOCK)
            col_ok = cols < TK
            kt = _tile_t(K, b, h, skb, skh, skt, skd, cols, col_ok, d_qk, D_QK)
            vt = _tile_t(V, b, h, svb, svh, svt, svd, cols, col_ok, d_v, D_V)
            xkt = kt  # read only with TILE_ROWS and KEY_ROWS
            if TILE_ROWS and KEY_ROWS:
                xkt = _tile_t(XK, b, h, skxb, skxh, skxt, skxd, cols, col_ok,
                              tl.arange(0, BD_X), D_X)
            key_row = _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO, R,
                                      Q_OFFSET, KEY_ROWS, BAND)
            s, qk, term, index = _scores(q, kt, table_row, key_row, i_abs, row_ok, cols,
                                         col_ok, pad_row, R_LO, R, Q_OFFSET, xq, AQ, h, sah,
                                         sad, sar, pid_m * BLOCK + Q_OFFSET, start_n, xkt, AK,
                                         sakh, sakd, sakr, HAS_PAD, CAUSAL, FACTOR, FULL,
                                         BAND, KEY_ROWS, IEEE, TILE_ROWS, D_X, BD_X,
                                         BLOCK, BLOCK)
            p = tl.exp2(s - lse[:, None])
            dp = _dot(do, vt, IEEE)
            if HIST:
                dp += _read_hist_grad(D_HIST, bh, TQ, rows, row_ok, R, index)
            if DROPOUT:
                dp = tl.where(_kept(seed, bh, rows, start_n, TQ, TK, P_DROP, BLOCK),
                              dp * DROP_SCALE, 0.0)
            ds = p * (dp - delta[:, None])  # of the logits
            if FACTOR:
                dq += _dot((ds * term).to(kt.dtype), tl.trans(kt), IEEE)
                ds = ds * qk  # of the factor
            else:
                dq += _dot(ds.to(kt.dtype), tl.trans(kt), IEEE)
            if TABLE_GRAD and FULL:  # index = j - i - R_LO, unclipped
                if BAND > 0:  # every pair has its entry
                    read = row_ok[:, None] & col_ok[None, :]
                else:
                    read = (index >= 0) & (index < R) & row_ok[:, None] & col_ok[None, :]
                d_row = _table_start(DTABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                     PER_ROW)  # laid out as the table
                tl.store(_full_row(d_row, i_abs, cols, R_LO, Q_OFFSET, BAND),
                         ds.to(DTABLE.dtype.element_ty), mask=read)
                if KEY_ROWS:
                    d_key_row = _key_rows_start(D_KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t,
                                                cols, R_LO, R, Q_OFFSET, KEY_ROWS, BAND)
                    tl.store(d_key_row + i_abs[:, None], ds.to(D_KEY_TABLE.dtype.element_ty),
                             mask=read)
            elif TABLE_GRAD and PER_ROW:
                d_rows += _clipped_sums(ds, i_abs, start_n, R_LO, R, BLOCK)
            elif TABLE_GRAD:
                # Diagonal c of the tile (key start_n + c - (BLOCK-1) + a for query row a)
                # is table column index[c]. Diagonals BLOCK.. are the next key tile's
                # diagonals 0.. (distances move by BLOCK per tile): they are carried
                # and added there, so every column is stored once, without atomics.
                index = start_n - (pid_m * BLOCK + Q_OFFSET) - (BLOCK - 1) - R_LO + c
                tl.store(d_table_row + index, _diagonal_sums(ds, 0, BLOCK) + carry,
                         mask=(index >= 0) & (index < R))
                carry = _diagonal_sums(ds, 1, BLOCK)  # its last one, 2 BLOCK - 1, is 0
                carry_index = index + BLOCK
        _store_tile(DQ, bh, TQ, rows, row_ok, d_qk, D_QK, dq)
        if TABLE_GRAD and not PER_ROW:  # the last key tile's upper diagonals
            tl.store(d_table_row + carry_index, carry,
                     mask=(carry_index >= 0) & (carry_index < R))
        if TABLE_GRAD and PER_ROW and not FULL:
            tl.store(DTABLE + (bh * TQ + rows)[:, None] * R + c[None, :], d_rows,
                     mask=row_ok[:, None] & (c < R)[None, :])


#: The rows made in the tiles: ``(x_q, A_q, x_k, A_k)``, the key side None where there is
#: none (:func:`distance_rows_attention`'s ``in_tile``).
TileRows = tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]


def _tile_operands(tile: Optional[TileRows], placeholder: Tensor) -> tuple[Tensor, ...]:
    """The kernels' ``XQ, AQ, XK, AK`` arguments: ``placeholder`` where not read."""
    return tuple(placeholder if x is None else x for x in (tile or (None,) * 4))


def _strides(x: Tensor) -> tuple[int, int, int, int]:
    return x.stride(0), x.stride(1), x.stride(2), x.stride(3)


def _block_dim(d: int) -> int:
    """Head dimensions padded (masked) to a power of two, at least 16 (``tl.dot``)."""
    return max(16, 1 << (d - 1).bit_length())


@dataclass(frozen=True)
class Tiles:
    """One kernel's launch: ``block_m`` queries by ``block_n`` keys per tile, and Triton's
    warps per program and software-pipelining depth."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 3


#: The three kernels' launches (``docs/decisions.md``, "Launch configuration"). The dQ
#: kernel's tiles are square (its diagonal sums); Shaw's rows must fit ``FORWARD.block_n``
#: and ``BACKWARD_DQ.block_n`` (:func:`clipped_rows_fit`).
FORWARD = Tiles(64, 64)
BACKWARD_DKDV = Tiles(64, 64)
BACKWARD_DQ = Tiles(64, 64)


#: What :func:`distance_rows_attention` does by default (``in_tile=None``), and so what the
#: attention runs for ``xl`` and ``huang4``: False, their rows as tensors. The rows made in
#: the tiles are off by default (``docs/decisions.md``, "Rows made in the tiles");
#: ``docs/benchmark-gpu-runs/pending.sh``'s ``rows-train`` stage sets this to time both.
ROWS_IN_TILE = False


#: Tables per row that cover every distance (:func:`distance_rows_attention`: ``xl``,
#: ``huang4``) are made in bands of ``ROW_BAND`` query rows (key columns for a key
#: side), each band's products over only the distances its rows meet: ``k_len +
#: ROW_BAND - 1`` columns (rounded up to 16) where one table over the attention's
#: distances has ``q_len + k_len - 1``, about half as many in the encoder, so about half
#: the memory traffic in making them, zeroing and storing their gradient and multiplying
#: it back. Bidirectional attention only: a causal band meets fewer distances the nearer
#: it is to the start (ragged), and a causal table already has only ``k_len``. 0: one
#: table (``docs/decisions.md``, "Tables per row by distance").
ROW_BAND = 16


def _query_block(tiles: Tiles, q_len: int) -> int:
    """Fewer query rows per tile for a short query block (a decoding step: one row), at
    least 16 (``tl.dot``)."""
    return min(tiles.block_m, max(16, 1 << (q_len - 1).bit_length()))


def _forward(q: Tensor, k: Tensor, v: Tensor, table: Tensor, key_table: Optional[Tensor],
             pad: Tensor, seed: Tensor, shape: "_Shape",
             tile: Optional[TileRows] = None) -> tuple[Tensor, Tensor, Tensor]:
    """The forward kernel's launch: the output, the rows' log-sum-exp and, with a
    histogram, the probabilities summed by clipped distance (else ``lse`` again)."""
    batch, heads, q_len, _ = q.shape
    out = q.new_empty(batch, heads, q_len, shape.d_v)
    lse = torch.empty(batch, heads, q_len, dtype=torch.float32, device=q.device)
    by_distance = (torch.empty(batch, heads, q_len, shape.r, dtype=torch.float32,
                               device=q.device) if shape.hist else lse)
    block_m = _query_block(FORWARD, q_len)
    with on_device_of(q):
        _forward_kernel[(triton.cdiv(q_len, block_m), batch * heads)](
            q, k, v, table, table if key_table is None else key_table, *_tile_operands(tile, q),
            pad, seed, out, lse,
            by_distance, *_strides(q), *_strides(k), *_strides(v), *shape.args(),
            BLOCK_M=block_m, BLOCK_N=FORWARD.block_n, num_warps=FORWARD.num_warps,
            num_stages=FORWARD.num_stages)
    return out, lse, by_distance


def _backward(q: Tensor, k: Tensor, v: Tensor, table: Tensor, key_table: Optional[Tensor],
              pad: Tensor, seed: Tensor, out: Tensor, lse: Tensor, by_distance: Tensor,
              d_out: Tensor, d_by_distance: Optional[Tensor], shape: "_Shape", table_grad: bool,
              tile: Optional[TileRows] = None
              ) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """The backward kernels' launches: the gradients of ``q``, ``k``, ``v``, the table
    (with ``table_grad``) and the key columns' table (where there is one). ``tile``:
    the rows' factors, made in the tiles (their gradients ``dS`` are still stored as
    ``(B, H, len, R)`` tensors, laid out as :func:`_table_rows` makes them)."""
    batch, heads, q_len, d_qk = q.shape
    k_len = k.size(2)
    d_out = d_out.contiguous()
    delta = torch.empty_like(lse)  # rowsum(dP * P) = rowsum(dO * O) (+ the histogram's)
    _delta_kernel[(triton.cdiv(q_len, 64), batch * heads)](  # rows are independent
        out, d_out, delta, q_len, D_V=shape.d_v, BD_V=_block_dim(shape.d_v), BLOCK_M=64)
    d_hist = lse  # not read without a histogram
    if shape.hist:
        d_hist = (torch.zeros_like(by_distance) if d_by_distance is None
                  else d_by_distance.float().contiguous())
        delta += (by_distance * d_hist).sum(-1)
    dq = torch.empty(batch, heads, q_len, d_qk, dtype=q.dtype, device=q.device)
    dk = torch.empty(batch, heads, k_len, d_qk, dtype=k.dtype, device=k.device)
    dv = torch.empty(batch, heads, k_len, v.size(3), dtype=v.dtype, device=v.device)
    block = BACKWARD_DQ.block_n
    q_blocks = triton.cdiv(q_len, block)
    d_key_table = None
    if shape.full:  # dS itself where a pair read the rows, zeros elsewhere; same layout
        if not table_grad:
            d_table = lse
        elif tile is not None:
            d_table = torch.zeros(heads, q_len, batch, shape.r, dtype=tile[0].dtype,
                                  device=q.device).permute(2, 0, 1, 3)
        else:
            d_table = torch.zeros_like(table)
        if tile is not None and tile[2] is not None and table_grad:
            d_key_table = torch.zeros(heads, k_len, batch, shape.r, dtype=tile[2].dtype,
                                      device=q.device).permute(2, 0, 1, 3)
        elif key_table is not None and table_grad:
            d_key_table = torch.zeros_like(key_table)
    else:
        d_table = torch.zeros((batch * heads * (q_len if shape.per_row else q_blocks),
                               shape.r if table_grad else 1),
                              dtype=torch.float32, device=q.device)
    key_table = table if key_table is None else key_table
    common = (q, k, v, table, key_table, *_tile_operands(tile, q), pad, seed, d_out, lse, delta,
              d_hist)
    strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(d_out))
    dkdv = BACKWARD_DKDV
    _backward_dkdv_kernel[(triton.cdiv(k_len, dkdv.block_n), batch * heads)](
        *common, dk, dv, *strides, *shape.args(), BLOCK_M=_query_block(dkdv, q_len),
        BLOCK_N=dkdv.block_n, num_warps=dkdv.num_warps, num_stages=dkdv.num_stages)
    _backward_dq_kernel[(q_blocks, batch * heads)](
        *common, dq, d_table, d_table if d_key_table is None else d_key_table,
        *strides, *shape.args(), TABLE_GRAD=table_grad, BLOCK=block,
        num_warps=BACKWARD_DQ.num_warps, num_stages=BACKWARD_DQ.num_stages)
    grad_table = None
    if table_grad and shape.full:
        grad_table = d_table
    elif table_grad and shape.per_row:
        grad_table = d_table.view(table.shape).to(table.dtype)
    elif table_grad:
        grad_table = d_table.view(batch, heads, q_blocks, shape.r).sum((0, 2))
        if table.size(0) == 1:  # one table for every head
            grad_table = grad_table.sum(0, keepdim=True)
        grad_table = grad_table.to(table.dtype)
    return dq, dk, dv, grad_table, d_key_table


def _padding_mask(key_padding_mask: Optional[Tensor], device: torch.device) -> Tensor:
    return (key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None
            else torch.zeros(1, dtype=torch.int8, device=device))


def dropout_seed(device: torch.device) -> Tensor:
    """A seed for the kernels' attention dropout, ``(1,)`` int64 on ``device``, drawn from
    torch's generator there, without a synchronization: ``torch.manual_seed`` makes a run
    repeatable, and activation checkpointing, which restores the generator's state before
    it recomputes a forward, redraws the same mask."""
    return torch.randint(2 ** 62, (1,), dtype=torch.int64, device=device)


def _dropout(dropout_p: float, seed: Optional[Tensor], device: torch.device) -> Tensor:
    """The seed the kernels read (without dropout an unread placeholder: ``empty``
    launches no kernel)."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p == 0.0:
        return torch.empty(1, dtype=torch.int64, device=device)
    if seed is None:
        return dropout_seed(device)
    if seed.shape != (1,) or seed.dtype != torch.int64 or seed.device != device:
        raise ValueError(f"seed must be a (1,) int64 tensor on {device}, got "
                         f"{tuple(seed.shape)} {seed.dtype} on {seed.device}")
    return seed


def dropout_keep(seed: Tensor, batch: int, heads: int, q_len: int, k_len: int,
                 dropout_p: float) -> Tensor:
    """The pairs the kernels keep under attention dropout with ``seed`` and
    ``dropout_p``, ``(B, H, q_len, k_len)`` bool: the mask they draw inside their tiles
    (:func:`_kept`), written out, for references and checks."""
    _check_triton()
    keep = torch.empty(batch, heads, q_len, k_len, dtype=torch.int8, device=seed.device)
    with on_device_of(seed):
        _keep_kernel[(triton.cdiv(q_len, 64), triton.cdiv(k_len, 64), batch * heads)](
            seed, keep, q_len, k_len, dropout_p, BLOCK_M=64, BLOCK_N=64)
    return keep.bool()


class _DistanceAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, table: Tensor, r_lo: int,
                q_offset: int, key_padding_mask: Optional[Tensor], causal: bool,
                factor: bool, hist: bool, dropout_p: float, seed: Tensor):
        pad = _padding_mask(key_padding_mask, q.device)
        table = table.contiguous()
        shape = _Shape.of(q, k, v, q_offset, r_lo, table, key_padding_mask is not None,
                          causal, factor=factor, hist=hist, dropout_p=dropout_p)
        out, lse, by_distance = _forward(q, k, v, table, None, pad, seed, shape)
        ctx.save_for_backward(q, k, v, table, pad, seed, out, lse, by_distance)
        ctx.shape = shape
        return (out, by_distance) if hist else out

    @staticmethod
    def backward(ctx, d_out: Tensor, d_by_distance: Optional[Tensor] = None):
        q, k, v, table, pad, seed, out, lse, by_distance = ctx.saved_tensors
        with on_device_of(d_out):
            dq, dk, dv, grad_table, _ = _backward(
                q, k, v, table, None, pad, seed, out, lse, by_distance, d_out,
                d_by_distance, ctx.shape, ctx.needs_input_grad[3])
        return dq, dk, dv, grad_table, None, None, None, None, None, None, None, None


def _heads_as_rows(x: Tensor) -> Tensor:
    """``(B, H, len, d)`` as ``(H, len * B, d)``: a view of fairseq's ``(len, B, H * d)``
    projections."""
    batch, heads, length, d = x.shape
    return x.permute(1, 2, 0, 3).reshape(heads, length * batch, d)


def _band_windows(a: Tensor, start: int, step: int, count: int, width: int) -> Tensor:
    """Columns ``start + n * step + [0, width)`` of ``a`` ``(H, d, R)`` for ``n < count``,
    zeros outside ``[0, R)``, as ``(H * count, d, width)``: a copy the size of ``a``
    times ``width / |step|``, not of the batch. Differentiable (its backward adds the
    overlapping windows back)."""
    if step < 0:  # the same windows, taken from the reversed columns and turned back
        return _band_windows(a.flip(-1), a.size(-1) - width - start, -step, count,
                             width).flip(-1)
    span = (count - 1) * step + width
    left, right = max(0, -start), max(0, start + span - a.size(-1))
    a = torch.nn.functional.pad(a, (left, right)).narrow(-1, start + left, span)
    return a.unfold(-1, width, step).transpose(1, 2).reshape(-1, a.size(1), width)


@dataclass(frozen=True)
class _RowTables:
    """How the tables per row are made from ``A_q`` (and ``A_k``): windows of its columns,
    ``(H * count, d, width)``, each multiplied by the rows of its band (:func:`_table_rows`).

    ``band = 0``: one table over every distance, ``A`` itself with zero columns up to a
    multiple of 16 (never read unmasked: aligned rows for the products and the kernel's
    loads, as Triton specializes integers divisible by 16), the key side's distances
    reversed, its zeros first (:func:`_key_rows_start`). Else bands of ``band`` rows
    (:data:`ROW_BAND`): band ``n`` of the queries (rows ``t`` in ``n * band + [0,
    band)``) meets the distances from ``-(q_offset + n * band + band - 1)`` on, pair ``(t,
    j)`` at column ``j + band - 1 - t % band``; band ``n`` of the keys meets them from ``n *
    band + band - 1 - q_offset`` down (reversed, so that a key column's addresses run along
    the queries), pair ``(t, j)`` at column ``t + band - 1 - j % band``."""

    band: int
    width: int
    q_start: int = 0  # bands: the first query window's first column of A_q
    k_start: int = 0  # bands: the first key window's first column of A_k (before reversing)
    q_bands: int = 1
    k_bands: int = 1

    @classmethod
    def one(cls, r: int) -> "_RowTables":
        return cls(0, r + -r % 16)

    @classmethod
    def banded(cls, band: int, q_len: int, k_len: int, q_offset: int,
               r_lo: int) -> "_RowTables":
        width = -(-(max(q_len, k_len) + band - 1) // 16) * 16  # aligned rows
        return cls(band, width, -(q_offset + band - 1) - r_lo,
                   band - 1 - q_offset - (width - 1) - r_lo, -(-q_len // band),
                   -(-k_len // band))

    def query_windows(self, a_q: Tensor) -> Tensor:
        if self.band == 0:
            return torch.nn.functional.pad(a_q, (0, self.width - a_q.size(-1)))
        return _band_windows(a_q, self.q_start, -self.band, self.q_bands, self.width)

    def key_windows(self, a_k: Tensor) -> Tensor:
        if self.band == 0:
            return torch.nn.functional.pad(a_k.flip(-1), (self.width - a_k.size(-1), 0))
        return _band_windows(a_k, self.k_start, self.band, self.k_bands, self.width).flip(-1)


def _table_rows(x: Tensor, windows: Tensor, band: int) -> tuple[Tensor, Tensor]:
    """``x`` ``(B, H, len, d)`` as ``(H * bands, band * B, d)`` (zero rows after ``len``;
    ``band = 0``: one band, ``(H, len * B, d)``, a view of fairseq's ``(len, B, H * d)``
    projections) and each band's products with its window of ``windows`` ``(H * bands, d,
    W)``: one batched product, no copy of a window per sentence, laid out ``(H, bands *
    band, B, W)`` and returned as its ``(B, H, bands * band, W)`` view."""
    batch, heads, length, d = x.shape
    bands = windows.size(0) // heads
    band = band or length
    x_heads = _heads_as_rows(x)
    extra = bands * band - length
    if extra:
        x_heads = torch.nn.functional.pad(x_heads, (0, 0, 0, extra * batch))
    x_bands = x_heads.reshape(heads * bands, band * batch, d)  # in bands, a copy
    rows = torch.bmm(x_bands, windows).view(heads, bands * band, batch, -1)
    return x_bands, rows.permute(2, 0, 1, 3)


def _table_grads(x: Tensor, x_bands: Tensor, windows: Tensor, d_rows: Tensor,
                 need_x: bool, need_windows: bool
                 ) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """The gradients of :func:`_table_rows`' ``x`` and ``windows`` from ``d_rows``, where
    needed: one product each per window, the batch folded into the rows."""
    batch, heads, length, _ = x.shape
    d_bands = d_rows.permute(1, 2, 0, 3).reshape(x_bands.size(0), x_bands.size(1), -1)
    d_x = d_windows = None
    if need_x:  # (H * bands, band * B, d) back to (B, H, len, d)
        d_x = torch.bmm(d_bands, windows.transpose(1, 2)).view(
            heads, -1, batch, x.size(3))[:, :length].permute(2, 0, 1, 3)
    if need_windows:
        d_windows = torch.bmm(x_bands.transpose(1, 2), d_bands)
    return d_x, d_windows


@dataclass
class _Side:
    """One side's tables made again for the backward: ``A``'s windows through autograd
    (``a_grad`` to ``windows_grad``; in float32 for bands, whose overlapping windows'
    gradients add up), the windows in ``A``'s dtype (its own values: exact), ``x`` in
    bands and the tables (None where the tiles make them)."""

    a_grad: Tensor
    windows_grad: Tensor
    windows: Tensor
    x_bands: Tensor
    rows: Optional[Tensor]

    @classmethod
    def of(cls, x: Tensor, a: Tensor, windows_of: Callable[[Tensor], Tensor], band: int,
           in_tile: bool) -> "_Side":
        with torch.enable_grad():
            a_grad = (a.detach().float() if band else a.detach()).requires_grad_()
            windows_grad = windows_of(a_grad)
        windows = windows_grad.detach().to(a.dtype)
        if in_tile:
            return cls(a_grad, windows_grad, windows, _heads_as_rows(x), None)
        return cls(a_grad, windows_grad, windows, *_table_rows(x, windows, band))

    def grad_of_a(self, d_windows: Tensor) -> Tensor:
        """``A``'s gradient from its windows'."""
        d_a = torch.autograd.grad(self.windows_grad, self.a_grad,
                                  d_windows.to(self.a_grad.dtype))[0]
        return d_a.to(self.windows.dtype)


class _RowsAttention(torch.autograd.Function):
    """Tables per query row and per key column that are products, ``x_q A_q`` and
    ``x_k A_k`` (``(B, H, len, d) @ (H, d, R)``), made as :class:`_RowTables` says: in
    the forward for the kernel and again in the backward, never kept (``B x H x len x
    W`` each: ``W`` about ``2 len`` in one bidirectional table, about ``len`` in bands
    or causally); their gradients ``dS`` (stored in place) go to ``x`` and ``A``'s
    windows by one product each per window, and on to ``A`` through the windows' own
    backward (autograd). With ``in_tile`` the rows are not made as tables: each tile
    makes its own from ``x`` and ``A`` (:func:`_rows_in_tile`, :func:`_key_rows_in_tile`)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, x_q: Tensor, a_q: Tensor,
                x_k: Optional[Tensor], a_k: Optional[Tensor], r_lo: int, q_offset: int,
                key_padding_mask: Optional[Tensor], causal: bool, dropout_p: float,
                seed: Tensor, in_tile: bool, tables: _RowTables):
        pad = _padding_mask(key_padding_mask, q.device)
        windows_q = tables.query_windows(a_q)
        windows_k = None if a_k is None else tables.key_windows(a_k)
        tile = (x_q, windows_q, x_k, windows_k) if in_tile else None
        if in_tile:
            rows_q, rows_k = windows_q, None
        else:
            rows_q = _table_rows(x_q, windows_q, tables.band)[1]
            rows_k = None if x_k is None else _table_rows(x_k, windows_k, tables.band)[1]
        shape = _Shape.of(q, k, v, q_offset, r_lo, rows_q, key_padding_mask is not None,
                          causal, key_table=rows_k, full=True, dropout_p=dropout_p,
                          tile=tile, band=tables.band)
        out, lse, _ = _forward(q, k, v, rows_q, rows_k, pad, seed, shape, tile)
        ctx.save_for_backward(q, k, v, x_q, a_q, x_k, a_k, pad, seed, out, lse)
        ctx.shape, ctx.in_tile, ctx.tables = shape, in_tile, tables
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor):
        q, k, v, x_q, a_q, x_k, a_k, pad, seed, out, lse = ctx.saved_tensors
        tables, in_tile, needs = ctx.tables, ctx.in_tile, ctx.needs_input_grad
        query = _Side.of(x_q, a_q, tables.query_windows, tables.band, in_tile)
        key = None if x_k is None else _Side.of(x_k, a_k, tables.key_windows, tables.band,
                                                in_tile)
        tile = (x_q, query.windows, x_k, key and key.windows) if in_tile else None
        with on_device_of(d_out):
            dq, dk, dv, d_rows_q, d_rows_k = _backward(
                q, k, v, query.windows if in_tile else query.rows, key and key.rows, pad,
                seed, out, lse, lse, d_out, None, ctx.shape, True, tile)
        grads = [dq, dk, dv, None, None, None, None]
        for x, side, d_rows, n in ((x_q, query, d_rows_q, 3), (x_k, key, d_rows_k, 5)):
            if side is None:
                continue
            d_x, d_windows = _table_grads(x, side.x_bands, side.windows, d_rows, needs[n],
                                          needs[n + 1])
            grads[n] = d_x
            if d_windows is not None:
                grads[n + 1] = side.grad_of_a(d_windows)
        return (*grads, None, None, None, None, None, None, None, None)


class _Shape:
    """The scalar and compile-time arguments the three kernels share."""

    def __init__(self, heads: int, q_len: int, k_len: int, q_offset: int, r_lo: int,
                 table: Tensor, d_qk: int, d_v: int, has_pad: bool, causal: bool,
                 factor: bool, hist: bool, ieee: bool, key_table: Optional[Tensor] = None,
                 full: bool = False, dropout_p: float = 0.0,
                 tile: Optional[TileRows] = None, band: int = 0) -> None:
        self.heads, self.q_len, self.k_len, self.q_offset = heads, q_len, k_len, q_offset
        self.r_lo, self.r = r_lo, table.size(-1)
        self.per_row = table.dim() == 4  # (B, H, q_len, R)
        self.s_table_h = table.stride(0) if table.dim() == 2 and table.size(0) > 1 else 0
        # A table per row: its (B, H, q_len) strides, R contiguous. The key columns' table
        # (FULL) shares the batch and position strides; only its heads' stride differs.
        self.s_rows = (table.stride(0), table.stride(1), table.stride(2)) if self.per_row \
            else (0, 0, 0)
        # Rows made in the tiles (``table`` is A_q): no table is read; the strides are
        # those of their gradients, (H, len, B, R) in memory (_backward).
        self.tile_rows = tile is not None
        self.s_x, self.s_a, self.d_x = (0, 0, 0, 0), (0, 0, 0), 16
        self.s_xk, self.s_ak = (0, 0, 0, 0), (0, 0, 0)
        self.key_rows = key_table is not None
        self.s_key_h = key_table.stride(1) if key_table is not None else 0
        if tile is not None:
            x_q, a_q, x_k, a_k = tile
            batch = x_q.size(0)
            self.per_row, self.s_rows = True, (self.r, q_len * batch * self.r, batch * self.r)
            self.s_x, self.s_a, self.d_x = _strides(x_q), tuple(a_q.stride()), x_q.size(3)
            if x_k is not None and a_k is not None:  # its gradient: (H, k_len, B, R)
                self.key_rows, self.s_key_h = True, k_len * batch * self.r
                self.s_xk, self.s_ak = _strides(x_k), tuple(a_k.stride())
        if key_table is not None and (key_table.stride(0), key_table.stride(2)) != (
                self.s_rows[0], self.s_rows[2]):
            raise ValueError("the key columns' table must be laid out as the query rows'")
        self.d_qk, self.d_v, self.has_pad, self.causal, self.factor, self.hist, self.ieee = (
            d_qk, d_v, has_pad, causal, factor, hist, ieee)
        self.full, self.band = full, band
        self.dropout_p = dropout_p

    @classmethod
    def of(cls, q: Tensor, k: Tensor, v: Tensor, q_offset: int, r_lo: int, table: Tensor,
           has_pad: bool, causal: bool, factor: bool = False, hist: bool = False,
           key_table: Optional[Tensor] = None, full: bool = False,
           dropout_p: float = 0.0, tile: Optional[TileRows] = None,
           band: int = 0) -> "_Shape":
        return cls(q.size(1), q.size(2), k.size(2), q_offset, r_lo, table, q.size(3),
                   v.size(3), has_pad, causal, factor, hist, q.dtype == torch.float32,
                   key_table, full, dropout_p, tile, band)

    def args(self) -> tuple:
        return (self.s_table_h, *self.s_rows, self.s_key_h, *self.s_x, *self.s_a,
                *self.s_xk, *self.s_ak, self.heads, self.q_len, self.k_len, self.q_offset,
                self.r_lo, self.r, self.d_qk, self.d_v, _block_dim(self.d_qk),
                _block_dim(self.d_v), self.d_x, _block_dim(self.d_x), self.has_pad,
                self.causal, self.factor, self.per_row, self.key_rows, self.full,
                self.band, self.tile_rows, self.hist, self.ieee,
                self.dropout_p, 1.0 / (1.0 - self.dropout_p), self.dropout_p > 0.0)


def clipped_rows_fit(rows: int) -> bool:
    """Whether a table of ``rows`` clipped distances fits :func:`clipped_relative_attention`'s
    tiles (its sums by clipped distance gather within one tile's width)."""
    return 2 <= rows <= min(FORWARD.block_n, BACKWARD_DQ.block_n)


def _check_triton() -> None:
    if triton is None:
        raise RuntimeError("the fused distance kernel needs Triton (pip install triton, or "
                           "a CUDA build of torch, which brings it)")


def distance_attention(q: Tensor, k: Tensor, v: Tensor, table: Tensor, r_lo: int,
                       q_offset: int = 0, key_padding_mask: Optional[Tensor] = None,
                       causal: bool = False, factor: bool = False, dropout_p: float = 0.0,
                       seed: Optional[Tensor] = None) -> Tensor:
    """``softmax(q k^T + table[h, j - (q_offset + i) - r_lo] + mask) v``, no scaling; with
    ``factor``, ``softmax((q k^T) * table[h, j - (q_offset + i) - r_lo] + mask) v``.

    ``q``: ``(B, H, q_len, d_qk)``, already scaled; ``k``: ``(B, H, k_len, d_qk)``;
    ``v``: ``(B, H, k_len, d_v)``; ``table``: ``(H or 1, R)``, the bias of distances
    ``r_lo .. r_lo + R - 1``, which must cover every ``j - (q_offset + i)``;
    ``key_padding_mask``: ``(B, k_len)``, True at padding; ``causal``: mask keys
    ``j > q_offset + i``. Rows with no key to attend to get zeros. Differentiable in
    ``q``, ``k``, ``v`` and ``table``.
    ``dropout_p``: attention dropout on the probabilities (each kept one scaled by ``1 /
    (1 - dropout_p)``), its mask drawn in the tiles from ``seed`` (:func:`dropout_keep`;
    None: :func:`dropout_seed`).
    """
    _check_triton()
    batch, heads, q_len, _ = q.shape
    k_len = k.size(2)
    if table.dim() != 2 or table.size(0) not in (1, heads):
        raise ValueError(f"table must be (heads or 1, R), got {tuple(table.shape)}")
    if r_lo > -(q_offset + q_len - 1) or r_lo + table.size(1) - 1 < k_len - 1 - q_offset:
        raise ValueError(
            f"the table covers distances {r_lo}..{r_lo + table.size(1) - 1}; this attention "
            f"needs {-(q_offset + q_len - 1)}..{k_len - 1 - q_offset}")
    return _DistanceAttention.apply(q, k, v, table, r_lo, q_offset, key_padding_mask,
                                    causal, factor, False, dropout_p,
                                    _dropout(dropout_p, seed, q.device))


def clipped_relative_attention(q: Tensor, k: Tensor, v: Tensor, key_rows: Tensor,
                               r_lo: int, q_offset: int = 0,
                               key_padding_mask: Optional[Tensor] = None,
                               causal: bool = False, by_distance: bool = False,
                               dropout_p: float = 0.0, seed: Optional[Tensor] = None
                               ) -> tuple[Tensor, Optional[Tensor]]:
    """Shaw et al.'s attention with the relative terms read by clipped distance:
    ``softmax(q k^T + key_rows[b, h, i, c_ij] + mask) v`` with ``c_ij = clip(j - (q_offset +
    i), r_lo, r_lo + R - 1) - r_lo`` (``key_rows = q aK^T``, ``(B, H, q_len, R)``), and with
    ``by_distance`` also the probabilities summed by ``c``, ``(B, H, q_len, R)`` float32,
    which times ``aV`` is the value term. ``R`` may be at most the tiles' width (64).
    Differentiable in ``q``, ``k``, ``v``, ``key_rows`` and through the sums.
    ``dropout_p``, ``seed``: attention dropout, as for :func:`distance_attention`; the
    sums by distance add the dropped probabilities, as the value term reads them."""
    _check_triton()
    batch, heads, q_len, _ = q.shape
    if key_rows.shape[:3] != (batch, heads, q_len) or not clipped_rows_fit(key_rows.size(3)):
        raise ValueError(f"key_rows must be (B, H, q_len, R) with 2 <= R <= "
                         f"{min(FORWARD.block_n, BACKWARD_DQ.block_n)}, got "
                         f"{tuple(key_rows.shape)}")
    result = _DistanceAttention.apply(q, k, v, key_rows, r_lo, q_offset, key_padding_mask,
                                      causal, False, by_distance, dropout_p,
                                      _dropout(dropout_p, seed, q.device))
    return result if by_distance else (result, None)


def distance_rows_attention(q: Tensor, k: Tensor, v: Tensor, query_rows: tuple[Tensor, Tensor],
                            r_lo: int, q_offset: int = 0,
                            key_padding_mask: Optional[Tensor] = None, causal: bool = False,
                            key_rows: Optional[tuple[Tensor, Tensor]] = None,
                            dropout_p: float = 0.0, seed: Optional[Tensor] = None,
                            in_tile: Optional[bool] = None) -> Tensor:
    """Attention with terms that read the content by distance (Transformer-XL's ``q_i.W_R
    R_{i-j}``, Huang et al.'s method 4), every distance its own table column:
    ``softmax(q k^T + (x_q A_q)[b, h, i, r_ij] + (x_k A_k)[b, h, j, r_ij] + mask) v`` with
    ``r_ij = j - (q_offset + i) - r_lo``, no scaling.

    ``query_rows = (x_q, A_q)``: ``(B, H, q_len, d)`` and ``(H, d, R)``, the column of
    ``A_q`` for distance ``r_lo + c`` at ``c``; ``key_rows = (x_k, A_k)`` (or None):
    ``(B, H, k_len, d)`` and ``(H, d, R)``. ``R`` must cover every distance the attention
    has (``j > q_offset + i`` only up to 0 with ``causal``): no clipping. Rows with no key
    to attend to get zeros. Differentiable in every tensor.
    ``dropout_p``: attention dropout on the probabilities (each kept one scaled by ``1 /
    (1 - dropout_p)``), its mask drawn in the tiles from ``seed`` (:func:`dropout_keep`;
    None: :func:`dropout_seed`).
    ``in_tile``: each tile makes the products itself (:func:`_rows_in_tile`,
    :func:`_key_rows_in_tile`) instead of reading them from ``x_q A_q`` (and ``x_k A_k``)
    made as ``B x H x len x R`` tensors before the kernel, in the forward and again in
    the backward: the same sums, without those tensors' memory traffic, at the cost of a
    ``BLOCK x 2 BLOCK`` product per tile and side; None: :data:`ROWS_IN_TILE`.
    """
    _check_triton()
    q_len, k_len = q.size(2), k.size(2)
    x_q, a_q = query_rows
    x_k, a_k = key_rows if key_rows is not None else (None, None)
    r = a_q.size(-1)
    r_hi = 0 if causal else k_len - 1 - q_offset
    if r_lo > -(q_offset + q_len - 1) or r_lo + r - 1 < r_hi:
        raise ValueError(
            f"the rows cover distances {r_lo}..{r_lo + r - 1}; this attention needs "
            f"{-(q_offset + q_len - 1)}..{r_hi} (no clipping)")
    if a_k is not None and a_k.size(-1) != r:
        raise ValueError(f"the key rows have {a_k.size(-1)} distances, the query rows {r}")
    in_tile = ROWS_IN_TILE if in_tile is None else in_tile
    tables = _RowTables.one(r)
    if ROW_BAND > 0 and not causal and not in_tile:
        bands = _RowTables.banded(ROW_BAND, q_len, k_len, q_offset, r_lo)
        if bands.width < tables.width:  # not for a short block of queries
            tables = bands
    return _RowsAttention.apply(q, k, v, x_q, a_q, x_k, a_k, r_lo, q_offset,
                                key_padding_mask, causal, dropout_p,
                                _dropout(dropout_p, seed, q.device), in_tile, tables)
