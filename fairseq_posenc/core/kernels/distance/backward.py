"""The fused distance attention's backward kernels, in Triton.

As FlashAttention-2's backward (Dao 2023, Algorithm 2): each recomputes the probabilities
from the rows' log-sum-exp and redraws attention dropout's mask. :func:`_delta_kernel`
sums ``dO * O`` per row; :func:`_backward_dkdv_kernel` walks the query blocks for one
block of keys (``dK``, ``dV``); :func:`_backward_dq_kernel` walks the key tiles for one
block of queries (``dQ``) and sums ``dS`` into the term's gradient: along each tile's
diagonals for a table per head (each distance stored once per query block, no atomic
adds: the same bits every run), by clipped distance for Shaw's rows, ``dS`` itself where
the rows cover every distance. Launched by :func:`.launch._backward`.
"""

from __future__ import annotations

from .tile import tl, triton

if triton is not None:
    from .tile import (
        _clipped_sums,
        _diagonal_sums,
        _dot,
        _full_row,
        _key_rows_start,
        _kept,
        _program,
        _read_sums_grad,
        _scores,
        _store_tile,
        _table_start,
        _tile,
        _tile_t,
        reads,
    )

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
        Q, K, V, TABLE, KEY_TABLE, PAD, SEED, DO, LSE, DELTA, D_SUMS, DK, DV,
        sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdb, sdh, sdt, sdd,
        s_table_h, s_row_b, s_row_h, s_row_t, s_key_h, H, TQ, TK, Q_OFFSET, R_LO, R,
        D_QK: tl.constexpr, D_V: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
        TERM: tl.constexpr, HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, IEEE: tl.constexpr,
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
        pad_row = PAD + b * TK
        key_row = _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO, R,
                                  TERM)
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
            do = _tile(DO, b, h, sdb, sdh, sdt, sdd, rows, row_ok, d_v, D_V)
            lse = tl.load(LSE + bh * TQ + rows, mask=row_ok, other=float("inf"))
            delta = tl.load(DELTA + bh * TQ + rows, mask=row_ok, other=0.0)
            table_row = _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                     TERM)
            s, _, term, index = _scores(q, kt, table_row, key_row, rows + Q_OFFSET, row_ok,
                                        cols, col_ok, pad_row, R_LO, R, TERM, HAS_PAD, CAUSAL,
                                        IEEE)
            p = tl.exp2(s - lse[:, None])
            if DROPOUT:  # the dropped probabilities' gradient is dP times the mask's scale
                z = tl.where(_kept(seed, bh, rows, pid_n * BLOCK_N, TQ, TK, P_DROP, BLOCK_N),
                             DROP_SCALE, 0.0)
                dv += _dot(tl.trans((p * z).to(do.dtype)), do, IEEE)
            else:
                dv += _dot(tl.trans(p.to(do.dtype)), do, IEEE)
            dp = _dot(do, vt, IEEE)
            if reads(TERM, "sums"):  # the probabilities' share of the sums' gradient
                dp += _read_sums_grad(D_SUMS, bh, TQ, rows, row_ok, R, index)
            if DROPOUT:
                dp = dp * z
            ds = p * (dp - delta[:, None])
            if reads(TERM, "factor"):  # the gradient of q k^T
                ds = ds * term
            dk += _dot(tl.trans(ds.to(q.dtype)), q, IEEE)
        _store_tile(DK, bh, TK, cols, col_ok, d_qk, D_QK, dk)
        _store_tile(DV, bh, TK, cols, col_ok, d_v, D_V, dv)

    @triton.jit
    def _backward_dq_kernel(
        Q, K, V, TABLE, KEY_TABLE, PAD, SEED, DO, LSE, DELTA, D_SUMS, DQ, DTABLE,
        D_KEY_TABLE,
        sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdb, sdh, sdt, sdd,
        s_table_h, s_row_b, s_row_h, s_row_t, s_key_h, H, TQ, TK, Q_OFFSET, R_LO, R,
        D_QK: tl.constexpr, D_V: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
        TERM: tl.constexpr, HAS_PAD: tl.constexpr, CAUSAL: tl.constexpr, IEEE: tl.constexpr,
        P_DROP, DROP_SCALE, DROPOUT: tl.constexpr,
        TABLE_GRAD: tl.constexpr, BLOCK: tl.constexpr,
    ):
        """One block of queries: ``dQ = dS K``, and ``dS`` summed by distance into the
        table's gradient (square tiles): along the tiles' diagonals into this block's row
        of ``(B * H * query blocks, R)`` for a table per head, by clipped distance per row
        (``(B, H, TQ, R)``) for one per row. A table per row (and per key column) that
        covers every distance (``Term.full``) has one pair per entry: ``dS`` itself,
        stored where the pair read it."""
        PER_ROW: tl.constexpr = reads(TERM, "per_row")
        FULL: tl.constexpr = reads(TERM, "full")
        FACTOR: tl.constexpr = reads(TERM, "factor")
        pid_m, rows, bh, b, h = _program(H, BLOCK)
        row_ok = rows < TQ
        d_qk = tl.arange(0, BD_QK)
        d_v = tl.arange(0, BD_V)
        q = _tile(Q, b, h, sqb, sqh, sqt, sqd, rows, row_ok, d_qk, D_QK)
        do = _tile(DO, b, h, sdb, sdh, sdt, sdd, rows, row_ok, d_v, D_V)
        lse = tl.load(LSE + bh * TQ + rows, mask=row_ok, other=float("inf"))
        delta = tl.load(DELTA + bh * TQ + rows, mask=row_ok, other=0.0)
        i_abs = rows + Q_OFFSET
        table_row = _table_start(TABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                 TERM)
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
            key_row = _key_rows_start(KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t, cols, R_LO,
                                      R, TERM)
            s, qk, term, index = _scores(q, kt, table_row, key_row, i_abs, row_ok, cols,
                                         col_ok, pad_row, R_LO, R, TERM, HAS_PAD, CAUSAL, IEEE)
            p = tl.exp2(s - lse[:, None])
            dp = _dot(do, vt, IEEE)
            if reads(TERM, "sums"):
                dp += _read_sums_grad(D_SUMS, bh, TQ, rows, row_ok, R, index)
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
                read = (index >= 0) & (index < R) & row_ok[:, None] & col_ok[None, :]
                d_row = _table_start(DTABLE, b, h, s_table_h, s_row_b, s_row_h, s_row_t, rows,
                                     TERM)  # laid out as the table
                tl.store(_full_row(d_row, i_abs, cols, R_LO),
                         ds.to(DTABLE.dtype.element_ty), mask=read)
                if reads(TERM, "key_rows"):
                    d_key_row = _key_rows_start(D_KEY_TABLE, b, h, s_row_b, s_key_h, s_row_t,
                                                cols, R_LO, R, TERM)
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
