"""``fairseq_posenc.nn``, the torch-only API, against independent references.

- its self-attention against the papers' formulas written as loops (``support/naive.py``),
  padding included, and against the plugin's fairseq layer given the same weights and
  encoding module, for every attention-level encoding, both stacks;
- incremental decoding through a two-layer stack and one :class:`DecodingCache` against
  the full forward, with beam search's reordering and with a prefix fed at once, and
  padding against each sequence alone: ``fairseq_posenc.testing.check_encoding``, run for
  every encoding by ``tests/test_testing.py``;
- the options: every default is the plugin's flag default (its parser's), unknown
  options and those of another encoding are errors that name the valid ones;
- stacks share an encoding as the plugin's do (T5: one table per stack, computed once
  per forward and once per decoded sequence);
- the input-level embeddings against the sinusoid written from its formula.
"""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from torch import nn

import fairseq_posenc.nn as posenc
from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from fairseq_posenc.core.context import PositionScope
from fairseq_posenc.core.encodings.t5 import T5
from fairseq_posenc.plugin.position_args import add_position_args
from tests.support.model_utils import ATTENTION_ENCODINGS, INPUT_ENCODINGS, stack_params
from tests.support.naive import TOL, naive_attention, naive_rope, naive_sinusoid, naive_t5_bucket

D, H = 8, 2


def randomized(module: nn.Module) -> nn.Module:
    """Every parameter drawn anew (projection biases start at 0, tables near it: make
    them count), in float64, evaluation mode."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.5)
    return module.double().eval()


def layer(encoding, causal, **options) -> posenc.PositionalSelfAttention:
    return randomized(posenc.PositionalSelfAttention(D, H, encoding, causal=causal,
                                                     max_len=16, **options))


def padding(causal: bool) -> torch.Tensor:
    """Row 1 padded by 3 on the side fairseq pads it (sources left, targets right)."""
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[1, 6:] = causal
    mask[1, :3] = not causal
    return mask


@pytest.mark.parametrize("causal", [False, True])
def test_t5_against_the_formula_with_padding(causal):
    attn = layer("t5", causal, t5_num_buckets=8, t5_max_distance=6)
    table = attn.position_encoding.rel_bias
    x = torch.randn(2, 9, D, dtype=torch.float64)
    pad = padding(causal)
    want = naive_attention(attn, x.transpose(0, 1), causal, lambda b, h, i, j, q: float(
        table[h, naive_t5_bucket(j - i, 8, 6, not causal)]), key_padding=pad).transpose(0, 1)
    got = attn(x, pad)
    assert got.shape == x.shape
    assert (got - want)[~pad].abs().max() < TOL


def test_rope_against_the_formula():
    attn = layer("rope", True, rope_base=100.0)
    x = torch.randn(2, 7, D, dtype=torch.float64)
    want = naive_attention(attn, x.transpose(0, 1), True, lambda *_: 0.0,
                           rotate=lambda v, p: naive_rope(v, p, 100.0))
    assert (attn(x) - want.transpose(0, 1)).abs().max() < TOL


@pytest.mark.parametrize("encoding,causal", stack_params(ATTENTION_ENCODINGS))
def test_the_plugin_layer_computes_the_same(encoding, causal):
    """The plugin's ``MultiheadAttention`` subclass with this layer's weights and encoding
    module, fed fairseq's ``(time, batch, channel)`` and future mask."""
    ours = layer(encoding, causal)
    theirs = PositionalMultiheadAttention(D, H).double().eval()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())
    theirs.attach(ours.position_encoding, PositionScope())
    x = torch.randn(2, 9, D, dtype=torch.float64)
    pad = padding(causal)
    mask = torch.triu(torch.full((9, 9), float("-inf"), dtype=x.dtype), 1) if causal else None
    with torch.no_grad():
        want, _ = theirs(x.transpose(0, 1), None, None, key_padding_mask=pad,
                         attn_mask=mask, need_weights=False)
        got = ours(x, pad)
    assert (got - want.transpose(0, 1))[~pad].abs().max() < TOL


def decoder(encoding, layers=2, **options):
    stack = posenc.PositionStack(encoding, num_layers=layers, embed_dim=D, num_heads=H,
                                 causal=True, max_len=32, **options)
    blocks = randomized(nn.ModuleList(
        posenc.PositionalSelfAttention(D, H, stack, layer=i, causal=True)
        for i in range(layers)))
    return stack, blocks


def run(blocks, x, cache=None):
    for attn in blocks:
        x = x + attn(x, cache=cache)
    return x


def plugin_defaults() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_position_args(parser)
    return parser.parse_args([])


@pytest.mark.parametrize("encoding", ATTENTION_ENCODINGS + INPUT_ENCODINGS)
def test_every_option_has_the_plugin_default(encoding):
    defaults = plugin_defaults()
    options = posenc.encoding_options(encoding)
    assert options == {name: getattr(defaults, name) for name in options}
    prefix = encoding.split("_")[0]  # tupe_r's flags: --tupe-r-* and tupe_a's --tupe-*
    # xpos rotates as rope does and takes rope's p-RoPE option, declared the same way
    shared = {"xpos": ("rope_fraction",)}.get(encoding, ())
    assert all(name.startswith(prefix) or name in shared for name in options)


def test_named_options_reach_the_encoding():
    assert posenc.encoding_options("shaw") == {"shaw_clip": 16, "shaw_no_value": False}
    attn = posenc.PositionalSelfAttention(D, H, "shaw", causal=False, shaw_clip=3)
    assert attn.position_encoding.rel_key.shape == (7, D // H)  # distances -3..3


def test_wrong_options_are_errors_that_name_the_valid_ones():
    with pytest.raises(TypeError, match=r"'shaw_clip' \(an option of shaw\).*t5_num_buckets=32"):
        posenc.PositionalSelfAttention(D, H, "t5", causal=False, shaw_clip=4)
    with pytest.raises(TypeError, match="no option 't5_buckets'.*t5_max_distance=128"):
        posenc.PositionalSelfAttention(D, H, "t5", causal=False, t5_buckets=4)
    with pytest.raises(ValueError, match="shaw_clip must be a positive integer"):
        posenc.PositionalSelfAttention(D, H, "shaw", causal=False, shaw_clip=0)
    with pytest.raises(ValueError, match="diet_rel_sharing must be one of 'none', 'layer'"):
        posenc.PositionalSelfAttention(D, H, "diet_rel", causal=False, diet_rel_sharing="x")
    with pytest.raises(ValueError, match="shaw_clip must be an int"):
        posenc.PositionalSelfAttention(D, H, "shaw", causal=False, shaw_clip=2.5)
    with pytest.raises(ValueError, match="unknown encoding 'T5'"):
        posenc.PositionalSelfAttention(D, H, "T5", causal=False)


@pytest.mark.parametrize("encoding", INPUT_ENCODINGS)
def test_attention_refuses_input_level_encodings(encoding):
    with pytest.raises(ValueError, match=f"'{encoding}' is an input-level encoding.*"
                                         "PositionEmbedding"):
        posenc.PositionalSelfAttention(D, H, encoding, causal=False)
    with pytest.raises(ValueError, match="attention-level encoding.*PositionalSelfAttention"):
        posenc.PositionEmbedding("t5", D)


def test_a_stack_shares_its_table_as_the_plugin_does(monkeypatch):
    stack, blocks = decoder("t5", layers=3)
    assert len({id(attn.position_encoding) for attn in blocks}) == 1
    projections = 4 * (D * D + D)
    assert sum(p.numel() for p in blocks.parameters()) == 3 * projections + H * 32
    calls = []
    original = T5.distance_bias
    monkeypatch.setattr(T5, "distance_bias", lambda self, *a: calls.append(a) or original(self, *a))
    x = torch.randn(2, 5, D, dtype=torch.float64)
    with torch.no_grad(), stack.context():
        run(blocks, x)
    assert len(calls) == 1  # once per forward, not once per layer
    calls.clear()
    cache = posenc.DecodingCache()
    with torch.no_grad():
        for t in range(5):
            run(blocks, x[:, t:t + 1], cache)
    assert len(calls) == 1  # once per decoded sequence: each step slices its window
    _, per_layer = decoder("shaw", layers=3)
    assert len({id(attn.position_encoding) for attn in per_layer}) == 3
    _, first = decoder("t5_nob", layers=3)  # AT5's translation setting: the first layer
    assert [attn.position_encoding is None for attn in first] == [False, True, True]
    _, every = decoder("t5_nob", layers=3, pos_layers="all")
    assert all(attn.position_encoding is not None for attn in every)
    posenc.choose_kernels(blocks, "torch")
    assert all(attn.distance_kernel == "bias" for attn in blocks)


def test_sinusoidal_embedding_against_the_formula():
    emb = posenc.PositionEmbedding("sinusoidal", 6, max_len=4)
    x = torch.zeros(2, 7, 6, dtype=torch.float64)
    want = torch.tensor([naive_sinusoid(p, 6) for p in range(7)], dtype=torch.float64)
    assert (emb(x) - want).abs().max() < 1e-6  # beyond max_len too: sinusoids of any position
    assert (emb(x[:, :1], offset=5) - want[5:6]).abs().max() < 1e-6
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, :3] = True  # left padding: the real tokens count from 0
    padded = emb(x, pad)
    assert (padded[1, 3:] - want[:4]).abs().max() < 1e-6 and not padded[1, :3].any()
    assert (padded[0] - want).abs().max() < 1e-6


def test_learned_none_and_shape_embeddings():
    learned = posenc.PositionEmbedding("learned", 6, max_len=5)
    x = torch.zeros(2, 5, 6)
    assert torch.equal(learned(x), learned.weight)
    with pytest.raises(ValueError, match="beyond the learned table's 5 rows"):
        learned(torch.zeros(1, 6, 6))
    assert not posenc.PositionEmbedding("none", 6)(x).any()
    shape = posenc.PositionEmbedding("shape", 6, shape_max_shift=7)
    sinusoid = torch.tensor([naive_sinusoid(p, 6) for p in range(13)])
    assert (shape.eval()(x) - sinusoid[:5]).abs().max() < 1e-5  # evaluation: no shift
    torch.manual_seed(3)
    shifted = shape.train()(torch.zeros(50, 5, 6))
    shifts = set()
    for row in shifted:  # each row: 0..4 shifted by its own k in 0..7
        distances = (row[0] - sinusoid).abs().max(-1).values
        k = int(distances.argmin())
        assert (row - sinusoid[k:k + 5]).abs().max() < 1e-5
        shifts.add(k)
    assert shifts <= set(range(8)) and len(shifts) > 4
    assert math.isclose(posenc.encoding_options("shape")["shape_max_shift"], 500)
