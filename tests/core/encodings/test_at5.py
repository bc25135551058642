"""``at5`` / ``at5_nob`` (Wu et al. 2021) against naive loops written from the paper's
eqs. (17)-(20), plus initialisation, placement, parameter ownership and decoding.

The references compute ``g`` neuron by neuron and ``f`` with ``math.exp`` per element,
sharing nothing with the code under test but the parameter tensors. float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.encodings import PositionContext
from fairseq_posenc.core.encodings import get_encoding
from tests.support.batches import random_source
from tests.support.counting import count_distance_tables
from tests.support.model_utils import build_attention, build_model, encoding_values
from tests.support.naive import clip, naive_attention, run

TOL = 1e-9


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def naive_mlp(mlp, h: int, x: float) -> float:
    """g(x) = w3 . sigmoid(W2^T sigmoid(w1 x + b1) + b2) + b3 for head h, one neuron at a time."""
    l1, l2 = mlp.w2.shape[1:]
    hidden1 = [sigmoid(x * float(mlp.w1[h, a]) + float(mlp.b1[h, a])) for a in range(l1)]
    hidden2 = [sigmoid(sum(hidden1[a] * float(mlp.w2[h, a, c]) for a in range(l1))
                       + float(mlp.b2[h, c])) for c in range(l2)]
    return sum(hidden2[c] * float(mlp.w3[h, c]) for c in range(l2)) + float(mlp.b3[h])


def naive_at5_bias(enc, h: int, r: int, max_len: int) -> float:
    """Eqs. (17)-(20) with r = 0 on the r <= 0 side (docs/conventions.md, the authors' code)."""
    if r > 0:  # b_+(l) = 1 - exp(-l A max(0, gamma_+)), A = 1/L
        return naive_mlp(enc.g_pos, h, 1 - math.exp(-r * max(0.0, float(enc.alpha[h])) / max_len))
    return naive_mlp(enc.g_neg, h, 1 - math.exp(r * max(0.0, float(enc.beta[h])) / max_len))


def naive_nob_bias(enc, h: int, r: int, n: int) -> float:
    """f(r) = sigmoid(E_h[clip(r)]) in place of the exponential; g as in AT5."""
    table = enc.table  # columns: r = -(n-1) .. n-1 (.. 0 when causal)
    mlp = enc.g_pos if r > 0 else enc.g_neg
    return naive_mlp(mlp, h, sigmoid(float(table[h, clip(r, -(n - 1), n - 1) + n - 1])))


def at5_attention(causal: bool, max_len: int = 6, heads: int = 3):
    attn = build_attention("at5", causal=causal, num_heads=heads, embed_dim=4 * heads,
                           at5_max_len=max_len, at5_l1_width=5, at5_l2_width=3)
    enc = attn.encoding
    with torch.no_grad():  # slopes of a sensible size; head 0's beta < 0: relu makes f = 0
        enc.beta.copy_(torch.tensor([-2.0, 3.0, 9.0]))
        if enc.alpha is not None:
            enc.alpha.copy_(torch.tensor([4.0, -1.0, 12.0]))
    return attn, enc


@pytest.mark.parametrize("causal", [False, True])
def test_at5_attention(causal):
    attn, enc = at5_attention(causal)
    x = torch.randn(9, 2, 12, dtype=torch.float64)  # longer than L: at5 has no length limit
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: naive_at5_bias(enc, h, j - i, 6))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_at5_nob_attention(causal):
    n = 4  # shorter than the sequence: distances beyond +-(n-1) are clipped
    attn = build_attention("at5_nob", causal=causal, at5_nob_max_len=n,
                           at5_nob_l1_width=5, at5_nob_l2_width=3)
    enc = attn.encoding
    assert enc.table.shape == (2, n if causal else 2 * n - 1)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: naive_nob_bias(enc, h, j - i, n))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def test_at5_bias_is_not_flat():
    """Guards the comparisons above: the bias varies with the distance on both sides."""
    _, enc = at5_attention(causal=False)
    with torch.no_grad():
        bias = enc.distance_bias(-5, 5)
    assert bias.shape == (3, 11)
    assert (bias[1:, :5].std(dim=1) > 1e-4).all() and (bias[[0, 2], 6:].std(dim=1) > 1e-4).all()
    assert bias[0, :6].std() < 1e-12  # relu(beta) = 0: f = 0 at every r <= 0


@pytest.mark.parametrize("flags,lo,hi", [({}, 1.0, 15.0),
                                         ({"at5_slope_min": 2.0, "at5_slope_max": 3.0}, 2.0, 3.0)])
def test_at5_initialisation(flags, lo, hi):
    torch.manual_seed(0)
    enc = get_encoding("at5").build(encoding_values("at5", **flags), num_heads=64, head_dim=4,
                                    causal=False, max_positions=256)
    for slope in (enc.alpha, enc.beta):
        assert lo <= float(slope.min()) and float(slope.max()) <= hi
        assert float(slope.max()) - float(slope.min()) > 0.8 * (hi - lo)  # spread, not constant
    for mlp in (enc.g_neg, enc.g_pos):
        assert mlp.w1.shape == (64, 32) and mlp.w2.shape == (64, 32, 4) and mlp.w3.shape == (64, 4)
        for w in (mlp.w1, mlp.w2, mlp.w3):  # the authors': normal(0.1) truncated at 2 std
            assert w.abs().max() <= 0.2 and 0.05 < float(w.std()) < 0.1
        for b in (mlp.b1, mlp.b2, mlp.b3):
            assert torch.all(b == 0.1)


def test_at5_nob_initialisation():
    torch.manual_seed(0)
    enc = get_encoding("at5_nob").build(encoding_values("at5_nob"), num_heads=4, head_dim=4,
                                        causal=False, max_positions=50)
    assert enc.table.shape == (4, 99)
    assert 0 <= float(enc.table.min()) and float(enc.table.max()) < 1  # U[0, 1), the authors'


@pytest.mark.parametrize("encoding", ["at5", "at5_nob"])
def test_causal_module_owns_only_the_r_le_0_branch(encoding):
    model, _ = build_model(encoding)
    [enc_module] = model.encoder.pos_encodings
    [dec_module] = model.decoder.pos_encodings
    enc_names = {name for name, _ in enc_module.named_parameters()}
    dec_names = {name for name, _ in dec_module.named_parameters()}
    assert any(name.startswith("g_pos.") for name in enc_names)
    assert not any(name.startswith("g_pos.") or name == "alpha" for name in dec_names)
    assert dec_names == {name for name in enc_names
                         if not name.startswith("g_pos.") and name != "alpha"}


@pytest.mark.parametrize("encoding", ["at5", "at5_nob"])
def test_first_layer_only_by_default_every_layer_with_pos_layers_all(encoding):
    first, _ = build_model(encoding, ["--encoder-layers", "3", "--decoder-layers", "3"])
    every, _ = build_model(encoding, ["--encoder-layers", "3", "--decoder-layers", "3",
                                      "--pos-layers", "all"])
    for stack in ("encoder", "decoder"):
        [module] = getattr(first, stack).pos_encodings
        layers = [layer.self_attn.encoding for layer in getattr(first, stack).layers]
        assert layers[0] is module and all(p is None for p in layers[1:])
        [shared] = getattr(every, stack).pos_encodings  # one module serves every layer
        assert all(layer.self_attn.encoding is shared for layer in getattr(every, stack).layers)
    assert (sum(p.numel() for p in first.parameters())
            == sum(p.numel() for p in every.parameters()))


@pytest.mark.parametrize("encoding", ["at5", "at5_nob"])
def test_first_layer_only_changes_only_layer_0(encoding):
    """Zeroing the bias (its MLPs' output layers) changes layer 0's self-attention output;
    each later layer, re-run on its recorded input, gives its recorded output: it never
    adds the term."""
    model, d = build_model(encoding, ["--encoder-layers", "3"])
    src, lengths = random_source(d)
    seen = {}

    def record(i):  # fairseq calls self-attention with keywords
        return lambda mod, args, kwargs, out: seen.__setitem__(i, (kwargs, out[0].clone()))

    for i, layer in enumerate(model.encoder.layers):
        layer.self_attn.register_forward_hook(record(i), with_kwargs=True)
    with torch.no_grad():
        model.encoder(src, lengths)
        before = dict(seen)
        [module] = model.encoder.pos_encodings
        for mlp in (module.g_neg, module.g_pos):
            mlp.w3.zero_()
            mlp.b3.zero_()
        model.encoder(src, lengths)
    assert (before[0][1] - seen[0][1]).abs().max() > 1e-3  # layer 0 used the bias
    # The others' outputs change only through their inputs: same input, same output.
    for i in (1, 2):
        layer = model.encoder.layers[i].self_attn
        with torch.no_grad(), model.encoder.pos_scope.open():
            again = layer(**before[i][0])[0]
        assert (again - before[i][1]).abs().max() < 1e-6


@pytest.mark.parametrize("encoding", ["at5", "at5_nob"])
def test_shared_table_computed_once_per_forward_with_every_layer(encoding, monkeypatch):
    model, d = build_model(encoding, ["--pos-layers", "all"])
    calls = count_distance_tables(model, monkeypatch)
    src, lengths = random_source(d)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        model.decoder(torch.full((3, 5), d.eos()), enc_out)
    assert len(calls) == 2  # encoder + decoder, not once per layer


def test_incremental_step_applies_the_bias_over_keys_0_to_t():
    """Each decoding step's output is row t of the naive causal reference with the bias
    over keys 0..t, and differs from the authors' cached decoder, whose 1 x 1 bias slice
    is a constant per row (the same softmax as no bias at all)."""
    attn, enc = at5_attention(causal=True)
    T = 7
    x = torch.randn(T, 2, 12, dtype=torch.float64)
    with_bias = naive_attention(attn, x, True,
                                lambda b, h, i, j, q: naive_at5_bias(enc, h, j - i, 6))
    constant = naive_attention(attn, x, True, lambda b, h, i, j, q: naive_at5_bias(enc, h, 0, 6))
    state: dict = {}
    context = PositionContext(incremental=True)  # as the decoder keeps one per sequence
    for t in range(T):
        with torch.no_grad(), attn.scope.open(context):
            step, _ = attn(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state,
                           need_weights=False)
        assert (step[0] - with_bias[t]).abs().max() < TOL, f"step {t}"
        if t > 0:  # one key only at t = 0: nothing to weigh
            assert (step[0] - constant[t]).abs().max() > 1e-3, f"step {t}"


@pytest.mark.parametrize("flags,message", [
    (["--at5-slope-min", "5", "--at5-slope-max", "2"], "0 <= min <= max"),
    (["--at5-slope-min", "-1"], "0 <= min <= max"),
    (["--at5-slope-min", "0", "--at5-slope-max", "0"], "max > 0"),
    (["--at5-l1-width", "0"], "--at5-l1-width must be a positive integer"),
    (["--at5-max-len", "0"], "--at5-max-len must be a positive integer"),
])
def test_at5_arguments_are_checked(flags, message):
    with pytest.raises(ValueError, match=message):
        build_model("at5", flags)


def test_at5_nob_arguments_are_checked():
    with pytest.raises(ValueError, match="--at5-nob-l2-width must be a positive integer"):
        build_model("at5_nob", ["--at5-nob-l2-width", "0"])
