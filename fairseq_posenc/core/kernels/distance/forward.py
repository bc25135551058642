"""The fused distance attention's forward kernel, in Triton.

One program per block of queries and ``(b, h)``: the keys in tiles, an online softmax
(FlashAttention-2, Dao 2023, Algorithm 1) over ``q k^T`` and the term read by distance
(:func:`.tile._scores`), attention dropout drawn in the tiles; out come the output, each
row's log-sum-exp for the backward and, for ``Term.CLIPPED_SUMS``, the probabilities
summed by clipped distance. Launched by :func:`.launch._forward`.
"""

from __future__ import annotations

from .tile import tl, triton

if triton is not None:
    from .tile import (
        _clipped_sums,
        _dot,
        _key_rows_start,
        _kept,
        _program,
        _scores,
        _store_tile,
        _table_start,
        _tile,
        _tile_t,
        reads,
    )

    @triton.jit
    def _forward_kernel(
        Q, K, V, TABLE, KEY_TABLE, PAD, SEED, O, LSE, SUMS_OUT,
        sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd,
        s_table_h, s_row_b, s_row_h, s_row_t, s_key_h, H, TQ, TK, Q_OFFSET, R_LO, R,
        D_QK: tl.constexpr, D_V: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
        TERM: tl.constexpr, HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, IEEE: tl.constexpr,
        P_DROP, DROP_SCALE, DROPOUT: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        """One block of queries: ``O``, the log-sum-exp of each row, and where the term
        has them (``Term.sums``) the probabilities summed by clipped distance, ``(B, H,
        TQ, R)``."""
        SUMS: tl.constexpr = reads(TERM, "sums")
        pid_m, rows, bh, b, h = _program(H, BLOCK_M)
        row_ok = rows < TQ
        d_qk = tl.arange(0, BD_QK)
        d_v = tl.arange(0, BD_V)
        q = _tile(Q, b, h, sqb, sqh, sqt, sqd, rows, row_ok, d_qk, D_QK)
        i_abs = rows + Q_OFFSET
        table_row = _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                 TERM)
        pad_row = PAD + b * TK
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BD_V], tl.float32)
        sums = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if DROPOUT:
            seed = tl.load(SEED)
        hi = TK
        if CAUSAL:  # keys after the block's last query are masked for every row
            hi = tl.minimum(TK, (pid_m + 1) * BLOCK_M + Q_OFFSET)
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            col_ok = cols < TK
            kt = _tile_t(K, b, h, skb, skh, skt, skd, cols, col_ok, d_qk, D_QK)
            key_row = _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO,
                                      R, TERM)
            s, _, _, _ = _scores(q, kt, table_row, key_row, i_abs, row_ok, cols, col_ok,
                                 pad_row, R_LO, R, TERM, HAS_PAD, CAUSAL, IEEE)
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
            if SUMS:
                sums = sums * alpha[:, None] + _clipped_sums(p, i_abs, start_n, R_LO, R,
                                                             BLOCK_N)
            m_i = m_new
        seen = l_i > 0.0  # False: every key masked; the row attends to nothing
        l_safe = tl.where(seen, l_i, 1.0)
        out = acc / l_safe[:, None]
        lse = tl.where(seen, m_i + tl.log2(l_safe), float("inf"))  # then P = 0 in backward
        _store_tile(O, bh, TQ, rows, row_ok, d_v, D_V, out)
        tl.store(LSE + bh * TQ + rows, lse, mask=row_ok)
        if SUMS:
            c = tl.arange(0, BLOCK_N)
            tl.store(SUMS_OUT + (bh * TQ + rows)[:, None] * R + c[None, :],
                     sums / l_safe[:, None], mask=row_ok[:, None] & (c < R)[None, :])
