"""CoPE (Golovneva et al. 2024, sec. 3) against a naive float64 loop written from the
paper's equations: gates ``g_it = sigmoid(q_i.k_t)``, positions ``p_ij = sum_{t=j..i}
g_it`` clamped to ``p_max``, embeddings interpolated between ``e[floor p]`` and ``e[ceil
p]`` (the embeddings, where the module interpolates the logits), logits ``q_i.(k_j +
e[p_ij])``, all scaled by ``1/sqrt(d_h)`` as the authors' code; the encoder form (counts
in both directions, negative after the query), padding, decoding steps and their cost,
gradients and flags."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.context import PositionContext
from fairseq_posenc.core.encodings.cope import CoPE
from tests.support.gradients import gradcheck_with_parameters
from tests.support.model_utils import build_attention, build_model, encoding_values
from tests.support.naive import TOL, fairseq_padding, heads, naive_attention, run, run_steps

T, B = 8, 2


def cope_attention(causal: bool, npos=None):
    return build_attention("cope", causal=causal, cope_npos=npos)


def naive_cope(attn, x, causal):
    """``logit_term(b, h, i, j, q_i)``: ``q_i.e[p_ij] / sqrt(d_h)``, scalar by scalar."""
    enc = attn.encoding
    q, k, _ = heads(attn, x)
    D = attn.head_dim
    p_max = enc.npos - 1
    p_min = 0 if causal else -p_max

    def gate(b, h, i, t):
        return 1 / (1 + math.exp(-float(q[i, b, h] @ k[t, b, h]) / math.sqrt(D)))

    def embedding(p):  # column p of the table (the encoder's starts at -p_max)
        return enc.pos_emb[:, p - p_min]

    def term(b, h, i, j, q_i):
        if j <= i:
            p = sum(gate(b, h, i, t) for t in range(j, i + 1))
        else:  # the encoder form: counted from the query to the key, negative
            p = -sum(gate(b, h, i, t) for t in range(i, j + 1))
        p = min(max(p, p_min), p_max)
        lo, hi = math.floor(p), math.ceil(p)
        e = (p - lo) * embedding(hi) + (1 - p + lo) * embedding(lo)
        return float(q_i @ e) / math.sqrt(D)

    return term


@pytest.mark.parametrize("npos", [None, 3])  # 3: p_max = 2, most positions clamped
@pytest.mark.parametrize("causal", [False, True])
def test_cope_attention_against_naive_loop(causal, npos):
    """Row 1 is padded on one side (left in the encoder, right in the decoder, as fairseq
    batches them): its real tokens attend as in the sentence alone."""
    attn = cope_attention(causal, npos)
    x = torch.randn(T, B, 8, dtype=torch.float64)
    padding = fairseq_padding(B, T, causal)
    want = naive_attention(attn, x, causal, naive_cope(attn, x, causal), key_padding=padding)
    with torch.no_grad():
        got = run(attn, x, causal, padding)
    real = ~padding.t()
    assert (got[real] - want[real]).abs().max() < TOL


def test_a_padded_source_attends_as_the_sentence_alone():
    attn = cope_attention(causal=False)
    x = torch.randn(T, 1, 8, dtype=torch.float64)
    padded = torch.cat([torch.randn(3, 1, 8, dtype=torch.float64), x])
    padding = torch.zeros(1, T + 3, dtype=torch.bool)
    padding[0, :3] = True
    with torch.no_grad(), attn.scope.open():
        alone, _ = attn(x, x, x, need_weights=False)
        batch, _ = attn(padded, padded, padded, key_padding_mask=padding, need_weights=False)
    assert (batch[3:] - alone).abs().max() < TOL


def test_encoder_keys_after_the_query_have_negative_positions():
    """The encoder's table covers -p_max..p_max; for all gates at 1/2 the positions are
    half the distance, counted from the query, with the sign of i - j."""
    enc = cope_attention(causal=False, npos=6).encoding
    assert enc.pos_emb.shape == (4, 11)
    q = torch.zeros(1, 1, 5, 4, dtype=torch.float64)  # q.k = 0: every gate 1/2
    with torch.no_grad():
        enc.pos_emb.copy_(torch.arange(-5.0, 6.0).expand(4, -1))  # e[p] = (p, p, p, p)
        ones = torch.ones_like(q)
        got = enc.content_logits(ones / 4, q, 0, PositionContext())[0, 0]
    i, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    expected = ((i - j).abs() + 1) / 2 * torch.where(j <= i, 1.0, -1.0)  # p_ij
    assert torch.allclose(got, expected.double(), atol=1e-12)  # q.e[p] = p for q = 1/4


def test_decoding_steps_equal_the_full_forward_and_read_only_their_positions(monkeypatch):
    """Each step is row t of the naive causal reference; it reads z for the t + 2 integer
    positions its row can reach (0..t + 1), not the whole table: O(t) per step."""
    attn = cope_attention(causal=True)
    enc = attn.encoding
    x = torch.randn(T, B, 8, dtype=torch.float64)
    want = naive_attention(attn, x, True, naive_cope(attn, x, True))
    widths = []
    position_logits = CoPE.position_logits

    def counted(self, q, lo, hi):
        widths.append(hi - lo + 1)
        return position_logits(self, q, lo, hi)

    monkeypatch.setattr(CoPE, "position_logits", counted)
    assert (run_steps(attn, x) - want).abs().max() < TOL
    assert widths == [t + 2 for t in range(T)]
    assert enc.pos_emb.size(-1) > T + 1


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_finite_differences(causal):
    """Through the gates, the sums, the interpolation weights (the floor and ceiling carry
    none, as in the paper's piecewise-linear interpolation) and the table."""
    enc = cope_attention(causal, npos=4).encoding
    q = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    assert gradcheck_with_parameters(
        enc, lambda q, k: enc.content_logits(q, k, 0, PositionContext()), (q, k))


@pytest.mark.parametrize("flags,per_stack", [([], 2), (["--cope-shared"], 1)])
def test_one_table_per_layer_or_per_stack(flags, per_stack):
    model, _ = build_model("cope", flags)
    for stack, columns in ((model.encoder, 2 * 1024 + 1), (model.decoder, 1025)):
        assert len(stack.pos_encodings) == per_stack
        assert stack.pos_encodings[0].pos_emb.shape == (8, columns)  # d_h = 32 / 4


def test_defaults_are_the_authors():
    """A zero table of d_h x (max positions + 1) per layer, shared by the heads."""
    enc = CoPE.build(encoding_values("cope"), num_heads=8, head_dim=64, causal=True,
                     max_positions=1024)
    assert enc.pos_emb.shape == (64, 1025) and not enc.pos_emb.any()


def test_bad_npos_is_an_error_that_names_the_flag():
    with pytest.raises(ValueError) as error:
        build_model("cope", ["--cope-npos", "1"])
    assert str(error.value).startswith("--cope-npos must be at least 2, got 1.")


def layer_gradients(attn, x, causal, padding):
    """The layer's output on real tokens and the gradients of a weighted sum of it with
    respect to the input and every parameter (the table among them)."""
    x = x.clone().requires_grad_(True)
    out = run(attn, x, causal, padding)
    weights = torch.randn(out.shape, dtype=out.dtype,
                          generator=torch.Generator().manual_seed(3))
    real = (~padding.t())[..., None]
    grads = torch.autograd.grad((out * weights * real).sum(), [x, *attn.parameters()])
    return out * real, grads


@pytest.mark.parametrize("causal", [False, True])
def test_blocks_of_queries_equal_one_piece(causal, monkeypatch):
    """Past BLOCK_PAIRS pairs the logits are computed in blocks of queries (here 3, 3 and
    2 of 8: 2 rows x 2 heads x 8 keys x 3 queries = 96 pairs), each recomputed in the
    backward: outputs and gradients (input, projections, table) equal to one piece in
    float64, padding included; without autograd the blocks run once."""
    import fairseq_posenc.core.encodings.cope as cope

    attn = cope_attention(causal, npos=4)  # p_max = 2: the clamp acts too
    x = torch.randn(T, B, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    padding = fairseq_padding(B, T, causal)
    whole = layer_gradients(attn, x, causal, padding)
    calls = []
    block_logits = CoPE.block_logits

    def counted(self, q, k, q_offset):
        calls.append((q.size(-2), q_offset))
        return block_logits(self, q, k, q_offset)

    monkeypatch.setattr(CoPE, "block_logits", counted)
    monkeypatch.setattr(cope, "BLOCK_PAIRS", 2 * 2 * T * 3)
    blocks = layer_gradients(attn, x, causal, padding)
    assert sorted(calls) == sorted([(3, 0), (3, 3), (2, 6)] * 2)  # forward, backward
    torch.testing.assert_close(blocks[0], whole[0], rtol=1e-13, atol=1e-13)
    for got, want in zip(blocks[1], whole[1]):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    calls.clear()
    with torch.no_grad():
        assert torch.equal(run(attn, x, causal, padding) * (~padding.t())[..., None],
                           blocks[0].detach())
    assert calls == [(3, 0), (3, 3), (2, 6)]


def test_blocks_keep_no_pair_sized_tensor_for_the_backward(monkeypatch):
    """What autograd keeps of the logits' computation (its saved tensors, in bytes): one
    piece keeps several (B, H, T, T) tensors; in blocks, no more than the queries and
    keys it recomputes them from (the blocks' logits are concatenated, which keeps
    nothing)."""
    import fairseq_posenc.core.encodings.cope as cope

    enc = cope_attention(causal=False).encoding
    q = torch.randn(2, 2, 64, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 64, 4, dtype=torch.float64, requires_grad=True)
    pair_bytes = q[..., 0].numel() * 64 * 8  # one (B, H, T, T) float64 tensor

    def saved_bytes() -> int:
        saved = []

        def pack(t):
            saved.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            enc.content_logits(q, k, 0, PositionContext()).sum().backward()
        return sum(saved)

    assert saved_bytes() > 5 * pair_bytes
    monkeypatch.setattr(cope, "BLOCK_PAIRS", 2 * 2 * 64 * 8)  # blocks of 8 queries
    assert saved_bytes() <= q.numel() * 8 + k.numel() * 8 * 8  # q once, k per block
