"""Each encoding's attention against a naive loop written from the paper's formula.

The references below index tables by ``r = j - i`` (docs/conventions.md) and loop over
batch, head, query and key in plain Python; they share nothing with the code under test
but the parameter tensors. float64, tolerance 1e-9.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.encodings import PositionContext, PositionKind
from fairseq_posenc.positions import expand_distance_bias, gather_absolute_pairs, t5_bucket
from model_utils import build_attention

TOL = 1e-9


def naive_t5_bucket(r: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """T5 paper / mesh-tensorflow description, scalar by scalar."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if r > 0:
            bucket += num_buckets
        n = abs(r)
    else:
        n = max(-r, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    scaled = math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    return bucket + min(exact + int(scaled), num_buckets - 1)


def heads(attn, x):
    """Queries, keys and values of every head, ``(T, B, H, d_h)`` each, unscaled."""
    T, B, _ = x.shape
    shape = (T, B, attn.num_heads, attn.head_dim)
    return (attn.q_proj(x).view(shape), attn.k_proj(x).view(shape),
            attn.v_proj(x).view(shape))


@torch.no_grad()
def naive_attention(attn, x, causal, logit_term, value_term=None, rotate=None,
                    key_padding=None):
    """softmax_j(q_i.k_j / sqrt(d_h) + logit_term(b, h, i, j, q_i)) and sum_j p_ij (v_j + value_term);
    ``rotate(vector, position)`` first transforms every query and key (RoPE)."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    q, k, v = heads(attn, x)
    if rotate is not None:
        q = torch.stack([torch.stack([torch.stack([rotate(q[t, b, h], t) for h in range(H)])
                                      for b in range(B)]) for t in range(T)])
        k = torch.stack([torch.stack([torch.stack([rotate(k[t, b, h], t) for h in range(H)])
                                      for b in range(B)]) for t in range(T)])
    out = torch.zeros(T, B, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in (range(i + 1) if causal else range(T))
                        if key_padding is None or not key_padding[b, j]]
                e = [float(q[i, b, h] @ k[j, b, h]) / math.sqrt(D) + logit_term(b, h, i, j, q[i, b, h])
                     for j in keys]
                m = max(e)
                w = [math.exp(x_ - m) for x_ in e]
                s = sum(w)
                for j, wj in zip(keys, w):
                    vj = v[j, b, h] + (value_term(h, i, j) if value_term else 0)
                    out[i, b, h] += wj / s * vj
    return attn.out_proj(out.reshape(T, B, C))


def run(attn, x, causal):
    T = x.size(0)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.scope.open():
        out, _ = attn(x, x, x, attn_mask=mask, need_weights=False)
    return out


def clip(r: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, r))


@pytest.mark.parametrize("r,bucket", [(-1, 1), (-8, 8), (-16, 10), (-64, 14), (-127, 15),
                                      (-500, 15), (0, 0), (1, 17), (8, 24), (127, 31), (900, 31)])
def test_t5_bucket_spot_values_from_spec(r, bucket):
    assert int(t5_bucket(torch.tensor([r]))[0]) == bucket


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (64, 128), (16, 40)])
def test_t5_bucket_matches_naive(bidirectional, num_buckets, max_distance):
    r = torch.arange(-400, 401)
    got = t5_bucket(r, num_buckets, max_distance, bidirectional).tolist()
    want = [naive_t5_bucket(int(x), num_buckets, max_distance, bidirectional) for x in r]
    assert got == want


@pytest.mark.parametrize("causal", [False, True])
def test_t5_attention(causal):
    attn = build_attention("t5", causal=causal, t5_num_buckets=8, t5_max_distance=6)
    table = attn.encoding.rel_bias
    x = torch.randn(9, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[h, naive_t5_bucket(j - i, 8, 6, not causal)]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sharing", ["none", "head"])
def test_diet_rel_attention(causal, sharing):
    n = 4  # shorter than the sequence: distances beyond +-(n-1) are clipped
    attn = build_attention("diet_rel", causal=causal, diet_rel_max_len=n, diet_rel_sharing=sharing)
    table = attn.encoding.rel_bias  # rows: heads (1 if head-shared), columns: r = -(n-1)..
    assert table.shape == ((1 if sharing == "head" else 2), (n if causal else 2 * n - 1))
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[0 if sharing == "head" else h, clip(j - i, -(n - 1), n - 1) + n - 1]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("flags", [{}, {"diet_abs_symmetric": True, "diet_abs_rank": 3},
                                   {"diet_abs_sharing": "head"}])
def test_diet_abs_attention_with_padding(causal, flags):
    """DIET eq. (1) with positions counted over real tokens: row 1 is left-padded by 2, so
    its i-th real token uses row/column i of P_Q P_K^T."""
    attn = build_attention("diet_abs", causal=causal, max_positions=9, **flags)
    p_q = attn.encoding.p_q
    p_k = p_q if flags.get("diet_abs_symmetric") else attn.encoding.p_k
    T, pad = 7, 2
    x = torch.randn(T, 2, 8, dtype=torch.float64)
    padding = torch.zeros(2, T, dtype=torch.bool)
    if not causal:
        padding[1, :pad] = True

    def position(b, i):
        return i - pad if (not causal and b == 1) else i

    def term(b, h, i, j, q):
        hh = 0 if flags.get("diet_abs_sharing") == "head" else h
        return float(p_q[hh, max(position(b, i), 0)] @ p_k[hh, max(position(b, j), 0)])

    want = naive_attention(attn, x, causal, term, key_padding=padding)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.scope.open():
        got, _ = attn(x, x, x, key_padding_mask=padding if padding.any() else None,
                      attn_mask=mask, need_weights=False)
    rows = slice(None) if causal else slice(pad, None)  # padded queries are never used
    assert (got[rows, 1] - want[rows, 1]).abs().max() < TOL
    assert (got[:, 0] - want[:, 0]).abs().max() < TOL


@torch.no_grad()
def naive_multiplicative_attention(attn, x, causal, factor):
    """Huang et al. eq. 12: softmax_j((q_i.k_j) * a_ij / sqrt(d_h))."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    q, k, v = heads(attn, x)
    out = torch.zeros(T, B, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1) if causal else range(T)
                e = [float(q[i, b, h] @ k[j, b, h]) * factor(h, i, j) / math.sqrt(D) for j in keys]
                w = [math.exp(x_ - max(e)) for x_ in e]
                for j, wj in zip(keys, w):
                    out[i, b, h] += wj / sum(w) * v[j, b, h]
    return attn.out_proj(out.reshape(T, B, C))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip", [None, 2])
def test_huang1_attention(causal, clip):
    attn = build_attention("huang1", causal=causal, max_positions=12, huang1_clip=clip)
    a = attn.encoding.rel_scale  # heads x (|r| = 0 .. K)
    K = clip if clip else 11
    assert a.shape == (2, K + 1)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_multiplicative_attention(attn, x, causal,
                                          lambda h, i, j: float(a[h, min(abs(j - i), K)]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip", [None, 2])
def test_huang2_attention(causal, clip):
    attn = build_attention("huang2", causal=causal, max_positions=12, huang2_clip=clip)
    a = attn.encoding.rel_bias  # heads x (r = -K .. K), causal: -K .. 0
    K = clip if clip else 11
    assert a.shape == (2, K + 1 if causal else 2 * K + 1)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_multiplicative_attention(attn, x, causal,
                                          lambda h, i, j: float(a[h, clip_(j - i, K) + K]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def clip_(r: int, k: int) -> int:
    return max(-k, min(k, r))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip", [None, 2])
def test_huang4_attention(causal, clip):
    """Eq. 16: (q_i.k_j + q_i.a_{j-i} + k_j.a_{j-i}) / sqrt(d_h), per-head vectors a."""
    attn = build_attention("huang4", causal=causal, max_positions=12, huang4_clip=clip)
    a = attn.encoding.rel_emb  # heads x distances x d_h
    K = clip if clip else 11
    T, B, D = 7, 2, attn.head_dim
    x = torch.randn(T, B, 8, dtype=torch.float64)
    with torch.no_grad():
        keys = attn.k_proj(x).view(T, B, 2, D)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        (q + keys[j, b, h]) @ a[h, clip_(j - i, K) + K]) / math.sqrt(D))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_t5_nob_attention(causal):
    n = 3
    attn = build_attention("t5_nob", causal=causal, t5_nob_max_len=n)
    table = attn.encoding.rel_bias  # heads x distances -(n-1)..(n-1) (causal: ..0)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[h, clip(j - i, -(n - 1), n - 1) + n - 1]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("values", [True, False])
def test_shaw_attention(causal, values):
    k = 2
    flags = dict(shaw_clip=k, shaw_no_value=not values)
    attn = build_attention("shaw", causal=causal, **flags)
    a_k, a_v = attn.encoding.rel_key, attn.encoding.rel_value
    assert a_k.shape[0] == (k + 1 if causal else 2 * k + 1)
    D = attn.head_dim
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(
        attn, x, causal,
        lambda b, h, i, j, q: float(q @ a_k[clip(j - i, -k, k) + k]) / math.sqrt(D),
        (lambda h, i, j: a_v[clip(j - i, -k, k) + k]) if values else None,
    )
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_heads", [4, 6])
def test_alibi_attention(causal, num_heads):
    # Press et al.: slopes 2^(-8/H), 2^(-16/H), ... for H a power of two; for H = 6 the
    # slopes of H = 4 followed by the 1st and 3rd of H = 8.
    def slopes(n):
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    m = slopes(4) if num_heads == 4 else slopes(4) + slopes(8)[0:4:2]
    attn = build_attention("alibi", causal=causal, embed_dim=2 * num_heads, num_heads=num_heads)
    x = torch.randn(7, 2, 2 * num_heads, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: -m[h] * abs(j - i))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def naive_rope(vec, p, base=10000.0):
    """Su et al. eq. 34: pair (2i, 2i+1) turned by p * base^(-2i/d)."""
    d = vec.numel()
    out = vec.clone()
    for i in range(d // 2):
        a = p * base ** (-2 * i / d)
        x0, x1 = float(vec[2 * i]), float(vec[2 * i + 1])
        out[2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
        out[2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_rope_attention(causal):
    attn = build_attention("rope", causal=causal, embed_dim=12, num_heads=2)
    x = torch.randn(7, 2, 12, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: 0.0, rotate=naive_rope)
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rope_rotation_in_lower_precision(dtype):
    """The complex-product rotation (float32 / complex64, and float32 for half types)
    against the naive rotation in float64, on a strided (B, H, T, d_h) view as the
    attention passes it and on a slice with an odd storage offset."""
    attn = build_attention("rope", causal=False, embed_dim=12, num_heads=2)
    x = torch.randn(5, 3, 2, 7, dtype=torch.float64)  # (T, B, H, d_h + 1)
    for view in (x[..., :6].permute(1, 2, 0, 3), x[..., 1:].permute(1, 2, 0, 3)):
        got, _ = attn.encoding.rotate_qk(view.to(dtype), view.to(dtype), 2, PositionContext())
        assert got.dtype == dtype and got.shape == view.shape
        for b, h, t in ((0, 0, 0), (2, 1, 4), (1, 0, 3)):
            want = naive_rope(view[b, h, t], 2 + t)
            tol = 1e-5 if dtype == torch.float32 else 3e-2
            assert (got[b, h, t].double() - want).abs().max() < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float64, TOL), (torch.float32, 1e-5),
                                       (torch.bfloat16, 3e-2), (torch.float16, 3e-2)])
def test_rope_decoding_step_rotates_as_the_paper(dtype, tol):
    """A decoding step (every row at one position) rotates by one matrix product, the
    queries' with their scale folded in; against the naive rotation, at positions that
    make the context grow its window of matrices."""
    attn = build_attention("rope", causal=True, embed_dim=12, num_heads=2)
    ctx = PositionContext(incremental=True)
    q, k = torch.randn(2, 3, 2, 1, 6, dtype=torch.float64).unbind(0)  # (B, H, 1, d_h)
    for p in (0, 1, 17, 40):
        got_q, got_k = attn.encoding.rotate_qk(q.to(dtype), k.to(dtype), p, ctx, 0.375)
        assert got_q.dtype == dtype and got_q.shape == q.shape
        for got, x, scale in ((got_q, q, 0.375), (got_k, k, 1.0)):
            for b, h in ((0, 0), (2, 1)):
                want = naive_rope(x[b, h, 0], p) * scale
                assert (got[b, h, 0].double() - want).abs().max() < tol, (p, b, h)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_offset", [1, 3, 9])
def test_shaw_one_query_equals_its_row_of_the_general_path(causal, q_offset):
    """Shaw's one-query terms (a decoding step: rows read from a window by distance)
    against the last row of the same terms for two queries (gathers and sums by clipped
    distance), at offsets inside and past the clip."""
    attn = build_attention("shaw", causal=causal, embed_dim=8, num_heads=2, shaw_clip=2)
    shaw = attn.encoding
    g = torch.Generator().manual_seed(q_offset)
    q = torch.randn(2, 2, 2, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, q_offset + 1, 4, generator=g, dtype=torch.float64)
    probs = torch.randn(2, 2, 2, q_offset + 1, generator=g, dtype=torch.float64).softmax(-1)
    both = (shaw.logit_bias(q, k, q_offset - 1, PositionContext()),
            shaw.value_term(probs, q_offset - 1, PositionContext()))
    ctx = PositionContext(incremental=True)
    one = (shaw.logit_bias(q[:, :, 1:], k, q_offset, ctx),
           shaw.value_term(probs[:, :, 1:], q_offset, ctx))
    for got, want in zip(one, both):
        assert (got - want[:, :, 1:]).abs().max() < TOL


def test_distance_rows_of_one_query_are_the_sum_written_out():
    """:meth:`DistanceRows.one_query_logits` (a decoding step of Transformer-XL or Huang
    et al.'s method 4) against ``q_c.k_j + x_q.A_q[:, r] + x_k[j].A_k[:, r]``,
    ``r = j - q_offset - r_lo``, summed in loops; tables wider than the keys need."""
    from fairseq_posenc.encodings.base import DistanceRows

    g = torch.Generator().manual_seed(0)
    batch, heads, keys, dim, r_lo = 2, 3, 5, 4, -6
    q_offset = keys - 1
    q_c, x_q = torch.randn(2, batch, heads, 1, dim, generator=g, dtype=torch.float64)
    k, x_k = torch.randn(2, batch, heads, keys, dim, generator=g, dtype=torch.float64)
    a_q, a_k = torch.randn(2, heads, dim, 9, generator=g, dtype=torch.float64)  # r -6..2
    for key_side in (None, (x_k, a_k)):
        got = DistanceRows(q_c, (x_q, a_q), key_side, r_lo).one_query_logits(k, q_offset)
        assert got.shape == (batch, heads, 1, keys)
        for b in range(batch):
            for h in range(heads):
                for j in range(keys):
                    r = j - q_offset - r_lo
                    want = q_c[b, h, 0] @ k[b, h, j] + x_q[b, h, 0] @ a_q[h, :, r]
                    if key_side is not None:
                        want = want + x_k[b, h, j] @ a_k[h, :, r]
                    assert abs(float(got[b, h, 0, j] - want)) < TOL
    with pytest.raises(ValueError, match="needs distances -4..0; the rows have -3"):
        DistanceRows(q_c, (x_q, a_q), None, -3).one_query_logits(k, q_offset)


def test_rope_logits_depend_on_distance_only():
    attn = build_attention("rope", causal=False, embed_dim=12, num_heads=2)
    q, k = torch.randn(2, 1, 1, 6, dtype=torch.float64).unbind(0)
    logits = []
    for shift in (0, 37):
        ctx = PositionContext()
        qs, _ = attn.encoding.rotate_qk(q, q, shift + 3, ctx)
        _, ks = attn.encoding.rotate_qk(k, k, shift + 8, ctx)
        logits.append(float((qs * ks).sum()))
    assert abs(logits[0] - logits[1]) < TOL


@pytest.mark.parametrize("encoding,flags", [("t5", {}), ("diet_rel", {}), ("shaw", {}),
                                            ("shaw", {"shaw_no_value": True}),
                                            ("alibi", {}), ("rope", {}), ("huang4", {}),
                                            ("tupe_a", {}), ("tupe_r", {}), ("at5", {}),
                                            ("at5_nob", {}), ("xl", {})])
def test_fused_and_explicit_paths_agree(encoding, flags):
    attn = build_attention(encoding, causal=False, **flags)
    x = torch.randn(6, 3, 8, dtype=torch.float64)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, :2] = True
    with attn.scope.open():
        fused, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
        explicit, weights = attn(x, x, x, key_padding_mask=pad, need_weights=True)
    assert (fused - explicit).abs().max() < TOL
    assert weights.shape == (3, 6, 6) and torch.all(weights[1, :, :2] == 0)


@pytest.mark.parametrize("encoding,flags", [("t5", {}), ("diet_rel", {}), ("shaw", {}),
                                            ("alibi", {}), ("t5_nob", {}), ("huang4", {}),
                                            ("huang3", {}), ("at5", {}), ("at5_nob", {}),
                                            ("xl", {})])
def test_relative_terms_are_shift_invariant(encoding, flags):
    """Shifting every position by s leaves the position term of each (i, j) unchanged."""
    attn = build_attention(encoding, causal=False, max_positions=40, **flags)
    enc, n, s = attn.encoding, 6, 5
    q = torch.randn(1, 2, n + s, attn.head_dim, dtype=torch.float64)
    k = torch.randn(1, 2, n + s, attn.head_dim, dtype=torch.float64)

    def term(q, k, ctx):  # huang3's term replaces q.k; the others add to it
        if enc.kind is PositionKind.CONTENT_LOGITS:
            return enc.content_logits(q, k, 0, ctx)
        if enc.kind is PositionKind.DISTANCE_BIAS:
            return enc.expanded(q.size(-2), k.size(-2), 0, ctx)
        return enc.logit_bias(q, k, 0, ctx)

    ctx = PositionContext()
    shifted = term(q, k, ctx)[..., s:, s:]
    plain = term(q[:, :, s:], k[:, :, s:], ctx)
    assert (shifted - plain).abs().max() < TOL


def naive_sinusoid(p: int, d: int) -> list[float]:
    """fairseq / tensor2tensor sinusoid: sines then cosines, rates 10000^(-i/(h-1))."""
    h = d // 2
    rates = [10000 ** (-i / (h - 1)) for i in range(h)]
    return [math.sin(p * w) for w in rates] + [math.cos(p * w) for w in rates]


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "none"])
def test_input_position_term(encoding):
    """What the input encoding adds to the scaled token embedding, at real positions:
    the k-th real token gets row k + padding_idx + 1 (fairseq's numbering), whatever the
    padding of its row."""
    from model_utils import build_model

    model, d = build_model(encoding)
    src = torch.randint(d.nspecial, 30, (2, 6))
    src[0, :2] = d.pad()  # left padding
    for stack, tokens in ((model.encoder, src), (model.decoder, src.flip(1))):  # right pad
        with torch.no_grad():
            tok = stack.embed_scale * stack.embed_tokens(tokens)
            if stack is model.encoder:
                added = stack.forward_embedding(tokens)[0] - tok
            else:
                added = (stack.embed_positions(tokens) if stack.embed_positions is not None
                         else torch.zeros_like(tok))
        for b in range(tokens.size(0)):
            real = [t for t in range(tokens.size(1)) if tokens[b, t] != d.pad()]
            for k, t in enumerate(real):
                p = k + d.pad() + 1
                if encoding == "sinusoidal":
                    want = torch.tensor(naive_sinusoid(p, tok.size(-1)))
                elif encoding == "learned":
                    want = stack.embed_positions.weight[p]
                else:
                    want = torch.zeros(tok.size(-1))
                assert (added[b, t] - want).abs().max() < 1e-5, (encoding, b, t)


@pytest.mark.parametrize("encoding", ["huang1", "huang2"])
def test_huang_factors_start_at_one(encoding):
    """Multiplicative methods start from plain attention (docs/conventions.md: start a at 1)."""
    from fairseq_posenc.encodings import get_encoding
    from model_utils import encoding_args

    enc = get_encoding(encoding).build(encoding_args(), num_heads=2, head_dim=4, causal=False,
                                       max_positions=10)
    assert all(torch.all(p == 1) for p in enc.parameters())


@pytest.mark.parametrize("q_len,k_len,q_offset,r_lo,extra", [
    (5, 5, 0, -4, 0), (1, 9, 8, -8, 0), (3, 9, 6, -12, 4), (4, 7, 0, -10, 7), (6, 2, 0, -5, 0)])
def test_expand_distance_bias_reads_each_pair_distance(q_len, k_len, q_offset, r_lo, extra):
    """b[h, i, j] = table[h, (j - (q_offset + i)) - r_lo], for tables that cover more
    distances than needed (decoding allocates ahead), and its gradient."""
    r_hi = k_len - 1 - q_offset + extra
    table = torch.randn(3, r_hi - r_lo + 1, dtype=torch.float64, requires_grad=True)
    got = expand_distance_bias(table, r_lo, q_len, k_len, q_offset)
    weights = torch.randn(3, q_len, k_len, dtype=torch.float64)
    (got * weights).sum().backward()
    want_grad = torch.zeros_like(table)
    for h in range(3):
        for i in range(q_len):
            for j in range(k_len):
                r = j - (q_offset + i)
                assert got[h, i, j] == table[h, r - r_lo]
                want_grad[h, r - r_lo] += weights[h, i, j]
    assert (table.grad - want_grad).abs().max() < TOL


def test_gather_absolute_pairs_reads_real_positions():
    """out[b, h, i, j] = table[h, pos[b, q_offset + i], pos[b, j]], and its gradient."""
    table = torch.randn(2, 6, 6, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 2, 3]])
    got = gather_absolute_pairs(table, positions, 1)
    assert got.shape == (3, 2, 4, 5)
    weights = torch.randn(got.shape, dtype=torch.float64)
    (got * weights).sum().backward()
    want_grad = torch.zeros_like(table)
    for b in range(3):
        for h in range(2):
            for i in range(4):
                for j in range(5):
                    pi, pj = int(positions[b, 1 + i]), int(positions[b, j])
                    assert got[b, h, i, j] == table[h, pi, pj]
                    want_grad[h, pi, pj] += weights[b, h, i, j]
    assert (table.grad - want_grad).abs().max() < TOL
