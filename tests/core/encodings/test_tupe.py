"""TUPE (Ke et al. 2020): tupe_a / tupe_r against naive loops from eqs. (7)-(11), the
[CLS] reset, official initialisation, once-per-forward computation, and length errors."""

from __future__ import annotations

import math

import pytest
import torch

import fairseq_posenc.core.encodings.absolute_tables as shared_terms
import fairseq_posenc.core.encodings.tupe as tupe
from fairseq_posenc.core.encodings.t5 import T5
from tests.support.batches import random_source
from tests.support.model_utils import MODEL_TOL, build_attention, build_model
from tests.support.naive import TOL, heads, naive_t5_bucket

T, B, PAD = 7, 2, 2  # row 1 of the batch is padded by PAD
BUCKETS, MAX_DISTANCE = 8, 6  # small enough that a 7-token sequence spans several log buckets


def layer_norm(x):
    """LayerNorm written out: (x - mean) / sqrt(biased var + eps) (eps 1e-5), no affine."""
    mean = sum(float(v) for v in x) / len(x)
    var = sum((float(v) - mean) ** 2 for v in x) / len(x)
    return torch.tensor([(float(v) - mean) / math.sqrt(var + 1e-5) for v in x],
                        dtype=torch.float64)


def naive_positional(enc, causal, reset, relative):
    """``term(h, pos_i, pos_j)``: eq. (7) (+ eq. (8)'s unscaled bucket bias), reset by eq. (9)."""
    H, D = enc.num_heads, enc.head_dim

    def projected(lin, pos):  # (p~_pos U)^h for every head: (H, D) nested lists
        p = layer_norm(enc.pos[pos]) * enc.pos_ln.weight + enc.pos_ln.bias
        out = [float(lin.weight[c] @ p + lin.bias[c]) for c in range(H * D)]
        return [out[h * D:(h + 1) * D] for h in range(H)]

    def term(h, i, j):
        if reset and i == 0:
            return float(enc.theta[h, 0])
        if reset and j == 0:
            return float(enc.theta[h, 1])
        pq, pk = projected(enc.u_q, i)[h], projected(enc.u_k, j)[h]
        value = sum(a * b for a, b in zip(pq, pk)) / math.sqrt(2 * D)
        if relative:
            value += float(enc.rel.rel_bias[h, naive_t5_bucket(j - i, BUCKETS, MAX_DISTANCE,
                                                               not causal)])
        return value

    return term


@torch.no_grad()
def naive_tupe(attn, x, causal, padding, position, term):
    """softmax_j((q_i.k_j) / sqrt(2 d_h) + term(h, pos_i, pos_j)) over real keys j."""
    H, D = attn.num_heads, attn.head_dim
    q, k, v = heads(attn, x)
    out = torch.zeros(T, B, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in (range(i + 1) if causal else range(T)) if not padding[b, j]]
                if not keys:  # a padded query with no real key: never used
                    continue
                e = [float(q[i, b, h] @ k[j, b, h]) / math.sqrt(2 * D)
                     + term(h, position(b, i), position(b, j)) for j in keys]
                m = max(e)
                w = [math.exp(e_ - m) for e_ in e]
                for j, wj in zip(keys, w):
                    out[i, b, h] += wj / sum(w) * v[j, b, h]
    return attn.out_proj(out.reshape(T, B, H * D))


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("encoding", ["tupe_a", "tupe_r"])
def test_tupe_attention_against_naive_loop(encoding, causal, reset):
    """Encoder: row 1 is left-padded, so its i-th real token has position i - PAD.
    Decoder: row 1 is right-padded (as fairseq batches targets); positions are indices."""
    buckets = ({"tupe_r_num_buckets": BUCKETS, "tupe_r_max_distance": MAX_DISTANCE}
               if encoding == "tupe_r" else {})
    attn = build_attention(encoding, causal=causal, max_positions=9, tupe_reset_first=reset,
                           **buckets)
    enc = attn.encoding
    assert (enc.theta is not None) == reset
    x = torch.randn(T, B, 8, dtype=torch.float64)
    padding = torch.zeros(B, T, dtype=torch.bool)
    if causal:
        padding[1, T - PAD:] = True
    else:
        padding[1, :PAD] = True

    def position(b, i):
        return i - PAD if (not causal and b == 1) else i

    term = naive_positional(enc, causal, reset, relative=encoding == "tupe_r")
    want = naive_tupe(attn, x, causal, padding, lambda b, i: max(position(b, i), 0), term)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.scope.open():
        got, _ = attn(x, x, x, key_padding_mask=padding, attn_mask=mask, need_weights=False)
    rows = slice(0, T - PAD) if causal else slice(PAD, T)  # padded queries are never used
    assert (got[rows, 1] - want[rows, 1]).abs().max() < TOL
    assert (got[:, 0] - want[:, 0]).abs().max() < TOL
    with attn.scope.open():  # no padding mask at all: positions are the indices
        alone, _ = attn(x[:, :1], x[:, :1], x[:, :1], attn_mask=mask, need_weights=False)
    assert (alone[:, 0] - want[:, 0]).abs().max() < TOL


def test_reset_replaces_first_row_and_column_only():
    """Eq. (9) on the position-only term itself: row 0 is theta_1 (diagonal included),
    column 0 below it theta_2; everything else is the untouched tupe_r term."""
    attn = build_attention("tupe_r", causal=False, max_positions=9, tupe_reset_first=True)
    enc = attn.encoding
    theta = enc.theta
    with torch.no_grad():
        term = enc.positional_term(6)
        enc.theta = None
        plain = enc.positional_term(6)
    assert term.shape == (2, 6, 6)
    assert torch.equal(term[:, 1:, 1:], plain[:, 1:, 1:])
    assert torch.equal(term[:, 0, :], theta[:, :1].expand(2, 6))
    assert torch.equal(term[:, 1:, 0], theta[:, 1:].expand(2, 5))


def test_bucket_bias_is_not_scaled():
    """tupe_r - tupe_a is exactly b_h[bucket(j - i)] (official code: added after scaling)."""
    attn = build_attention("tupe_r", causal=False, max_positions=9)
    enc = attn.encoding
    table = enc.rel.rel_bias.detach().clone()
    with torch.no_grad():
        full = enc.positional_term(9)
        enc.rel.rel_bias.zero_()  # leaves the absolute term of eq. (7) alone
        diff = full - enc.positional_term(9)
    for h in range(2):
        for i in range(9):
            for j in range(9):
                want = float(table[h, naive_t5_bucket(j - i, 32, 128, True)])
                assert abs(float(diff[h, i, j]) - want) < TOL


@pytest.mark.parametrize("encoding", ["tupe_a", "tupe_r"])
def test_official_initialisation_and_sharing(encoding):
    """guolinke/TUPE applies BERT's init_bert_params to the whole model: tables and linear
    weights N(0, 0.02), linear biases 0, LayerNorm (1, 0)."""
    torch.manual_seed(0)
    fresh = tupe.TupeR(num_heads=8, head_dim=64, causal=False, max_positions=512,
                       tupe_reset_first=True)  # BERT-base-like sizes
    assert torch.equal(fresh.pos_ln.weight, torch.ones(512))
    assert torch.equal(fresh.pos_ln.bias, torch.zeros(512))
    for lin in (fresh.u_q, fresh.u_k):
        assert lin.weight.shape == (512, 512) and torch.equal(lin.bias, torch.zeros(512))
        assert abs(float(lin.weight.std()) - 0.02) < 1e-3
    for table in (fresh.pos, fresh.rel.rel_bias, fresh.theta):
        assert abs(float(table.std()) - 0.02) < 5e-3
    assert isinstance(fresh.rel, T5) and fresh.rel.rel_bias.shape == (8, 32)
    # one module per stack shared by every layer; word logits scaled by 1/sqrt(2 d_h)
    model, _ = build_model(encoding)
    for stack, causal in ((model.encoder, False), (model.decoder, True)):
        assert len(stack.pos_encodings) == 1
        shared = stack.pos_encodings[0]
        assert all(layer.self_attn.encoding is shared for layer in stack.layers)
        assert shared.content_scale == 2 ** -0.5 and shared.theta is None  # reset: off
        if encoding == "tupe_r":
            assert shared.rel.bidirectional is not causal


@pytest.mark.parametrize("encoding", ["tupe_a", "tupe_r"])
def test_positional_term_once_per_forward_and_window(encoding, monkeypatch):
    """``p~ U_Q``, ``p~ U_K`` and their H x n x n product are computed once per stack and
    forward (not per layer), read at the padded source's positions once for all layers,
    and a few times over 40 steps."""
    model, d = build_model(encoding)
    terms, reads = [], []
    original_term, original_read = tupe.TupeA.projections, shared_terms.gather_absolute_pairs

    def counting_term(self, n):
        terms.append(n)
        return original_term(self, n)

    def counting_read(*args):
        reads.append(args[0].shape)
        return original_read(*args)

    monkeypatch.setattr(tupe.TupeA, "projections", counting_term)
    monkeypatch.setattr(shared_terms, "gather_absolute_pairs", counting_read)
    matmuls = []  # the only 3-D matmul is (p~ U_Q)(p~ U_K)^T; attention's are 4-D
    matmul = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda a, b: (a.dim() == 3 and matmuls.append(a.shape))
                        or matmul(a, b))
    buckets = []
    distance_bias = T5.distance_bias
    monkeypatch.setattr(T5, "distance_bias", lambda self, lo, hi:
                        buckets.append((lo, hi)) or distance_bias(self, lo, hi))
    src, lengths = random_source(d)  # left-padded rows
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        model.decoder(torch.full((3, 5), d.eos()), enc_out)
        assert len(model.encoder.layers) == 2
        assert len(terms) == len(matmuls) == 2  # encoder + decoder, not once per layer
        assert len(reads) == 1  # the padded source, shared by both encoder layers
        assert len(buckets) == (2 if encoding == "tupe_r" else 0)
        terms.clear(), matmuls.clear(), buckets.clear()
        prefix = torch.full((3, 1), d.eos())
        state: dict = {}
        for _ in range(40):
            model.decoder(prefix, enc_out, incremental_state=state)
            prefix = torch.cat([prefix, torch.full((3, 1), 5)], 1)
    assert len(terms) == len(matmuls) <= 3, terms  # a window grown geometrically
    assert len(buckets) <= (3 if encoding == "tupe_r" else 0)


@pytest.mark.parametrize("encoding", ["tupe_a", "tupe_r"])
def test_reset_option_decodes_incrementally_and_ignores_padding(encoding):
    model, d = build_model(encoding, ["--tupe-reset-first"])
    src, lengths = random_source(d)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        for row in range(src.size(0)):  # the first REAL token is reset, whatever the padding
            real = src[row][src[row].ne(d.pad())].unsqueeze(0)
            alone = model.encoder(real, lengths[row:row + 1])["encoder_out"][0][:, 0]
            padded = enc_out["encoder_out"][0][:, row][src[row].ne(d.pad())]
            assert (alone - padded).abs().max() < MODEL_TOL
        prefix = torch.full((3, 1), d.eos())
        state: dict = {}
        for t in range(6):
            step = model.decoder(prefix, enc_out, incremental_state=state)[0][:, -1]
            full = model.decoder(prefix, enc_out)[0][:, -1]
            assert (step - full).abs().max() < MODEL_TOL, f"step {t}"
            prefix = torch.cat([prefix, torch.randint(d.nspecial, 30, (3, 1))], 1)


def test_sequence_longer_than_table_is_an_error():
    model, d = build_model("tupe_r", ["--tupe-max-len", "8"])
    src = torch.randint(d.nspecial, 30, (1, 12))
    with pytest.raises(ValueError, match=r"has 12 tokens, .* only 8 \(--tupe-max-len\)"):
        model.encoder(src, torch.tensor([12]))
    src[0, :4] = d.pad()  # padding does not count: 8 real tokens in a row of 12 are fine
    model.encoder(src, torch.tensor([8]))
    attn = build_attention("tupe_a", causal=False, max_positions=5)
    x = torch.randn(6, 1, 8, dtype=torch.float64)
    with attn.scope.open(), pytest.raises(ValueError, match="--tupe-max-len"):
        attn(x, x, x, need_weights=False)


@pytest.mark.parametrize("flag,value,message", [
    ("--tupe-max-len", "0", "--tupe-max-len must be a positive integer"),
    ("--tupe-r-num-buckets", "2", "--tupe-r-num-buckets must be at least 4"),
    ("--tupe-r-max-distance", "0", "--tupe-r-max-distance must be a positive integer"),
])
def test_bad_flags(flag, value, message):
    with pytest.raises(ValueError, match=message):
        build_model("tupe_r", [flag, value])


@pytest.mark.parametrize("encoding", ["tupe_a", "tupe_r"])
def test_reset_adds_two_values_per_head_per_stack(encoding):
    def count(flags):
        model, _ = build_model(encoding, flags)
        return sum(p.numel() for p in model.parameters()), model

    plain, model = count([])
    with_reset, _ = count(["--tupe-reset-first"])
    assert with_reset - plain == 2 * 2 * model.encoder.layers[0].self_attn.num_heads
