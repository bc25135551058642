"""The ``path`` and ``stickbreaking`` layers (``fairseq_posenc.nn.PositionalSelfAttention``,
the plugin's computation) against float64 loops of the papers' layers, token by token:

* PaTH (Yang et al. 2025, sec. 2; the authors' layer): ``u_t = V U x_t``; ``c_t = sum_k
  W_k * u_{t-2+k}`` (a causal depthwise convolution of width 3, zeros before the sequence);
  ``w_t = normalize(silu(c_t))`` per head; ``beta_t = 2 sigmoid(a_h . x_t + b_h)``; logits
  ``q_i^T H_i ... H_{j+1} k_j / sqrt(d_h)`` of explicit ``d_h x d_h`` matrices, plus FoX's
  ``sum_{t=j+1..i} log sigmoid(g_h . x_t + c_h)`` with ``path_forget_gate``.
* Stick-breaking (Tan et al. 2025, sec. 2): keys walked from the nearest, each breaking
  ``sigmoid(q.k / sqrt(d_h))`` of what is left; the stick left dropped, or times the
  current token's value, or times ``b_h`` (``stickbreaking_remainder``).

Then the output projection. A padded position (left padding, as fairseq pads sources) is
dropped from the loop's sequence: the layer must give the same outputs at real tokens.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fairseq_posenc.nn import PositionalSelfAttention

D, H = 16, 2
HD = D // H


def randomized(layer):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.4)
    return layer.double().eval()


def heads(x, proj):
    return proj(x).view(x.size(0), H, HD)  # (T, H, d_h)


def naive_path_layer(layer, x):
    """One sequence ``x`` ``(T, D)``: the layer's output ``(T, D)``, token by token."""
    term = layer.position_encoding
    T = x.size(0)
    q, k, v = heads(x, layer.q_proj) / math.sqrt(HD), heads(x, layer.k_proj), heads(x, layer.v_proj)
    u = term.w_up(term.w_down(x))  # (T, H d_h)
    kernel = term.w_conv.weight[:, 0]  # (H d_h, 3)
    out = torch.zeros(T, H, HD, dtype=torch.float64)
    for h in range(H):
        mats, gates = [], []
        for t in range(T):
            c = sum(kernel[:, s] * u[t - 2 + s] for s in range(3) if t - 2 + s >= 0)
            wt = F.normalize(F.silu(c).view(H, HD)[h], dim=0)
            beta = 2 * torch.sigmoid(term.beta.weight[h] @ x[t] + term.beta.bias[h])
            mats.append(torch.eye(HD, dtype=torch.float64) - beta * torch.outer(wt, wt))
            gates.append(F.logsigmoid(term.gate.weight[h] @ x[t] + term.gate.bias[h])
                         if term.forget_gate else 0.0)
        for i in range(T):
            product, gate_sum, logits = torch.eye(HD, dtype=torch.float64), 0.0, []
            for j in range(i, -1, -1):
                logits.append(q[i, h] @ product @ k[j, h] + gate_sum)
                product, gate_sum = product @ mats[j], gate_sum + gates[j]
            p = torch.softmax(torch.stack(logits), dim=0)
            out[i, h] = sum(p[n] * v[i - n, h] for n in range(i + 1))
    return layer.out_proj(out.reshape(T, D))


def naive_stickbreaking_layer(layer, x, attend_current, remainder):
    term = layer.position_encoding
    T = x.size(0)
    q, k, v = heads(x, layer.q_proj) / math.sqrt(HD), heads(x, layer.k_proj), heads(x, layer.v_proj)
    out = torch.zeros(T, H, HD, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            stick = torch.tensor(1.0, dtype=torch.float64)
            for j in range(i if attend_current else i - 1, -1, -1):
                beta = torch.sigmoid(q[i, h] @ k[j, h])
                out[i, h] += stick * beta * v[j, h]
                stick = stick * (1 - beta)
            if remainder == "value":  # what is left, on the current token's value
                out[i, h] += stick * v[i, h]
            elif remainder == "bias":
                out[i, h] += stick * term.rest_bias[h]
    return layer.out_proj(out.reshape(T, D))


def left_padded(x, n):
    """The batch ``x`` ``(B, T, D)`` after ``n`` random rows of padding, and its mask."""
    batch = torch.cat([torch.randn(x.size(0), n, D, dtype=x.dtype), x], dim=1)
    mask = torch.zeros(batch.shape[:2], dtype=torch.bool)
    mask[:, :n] = True
    return batch, mask


@pytest.mark.parametrize("forget_gate", [False, True])
def test_path_layer_against_the_loop(forget_gate):
    layer = randomized(PositionalSelfAttention(D, H, "path", causal=True,
                                               path_forget_gate=forget_gate))
    x = torch.randn(2, 11, D, dtype=torch.float64)
    with torch.no_grad():
        want = torch.stack([naive_path_layer(layer, x[b]) for b in range(2)])
        torch.testing.assert_close(layer(x), want, rtol=1e-9, atol=1e-10)
        batch, mask = left_padded(x, 3)
        torch.testing.assert_close(layer(batch, mask)[:, 3:], want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("attend_current,remainder", [
    (False, "none"), (True, "none"), (False, "value"), (False, "bias"), (True, "bias")])
def test_stickbreaking_layer_against_the_loop(attend_current, remainder):
    layer = randomized(PositionalSelfAttention(
        D, H, "stickbreaking", causal=True, stickbreaking_attend_current=attend_current,
        stickbreaking_remainder=remainder))
    x = torch.randn(2, 9, D, dtype=torch.float64)
    with torch.no_grad():
        want = torch.stack([naive_stickbreaking_layer(layer, x[b], attend_current, remainder)
                            for b in range(2)])
        torch.testing.assert_close(layer(x), want, rtol=1e-9, atol=1e-10)
        batch, mask = left_padded(x, 2)
        torch.testing.assert_close(layer(batch, mask)[:, 2:], want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("encoding", ["path", "stickbreaking"])
def test_an_encoder_refuses_it(encoding):
    with pytest.raises(ValueError, match="causal attention only.*give the encoder another"):
        PositionalSelfAttention(D, H, encoding, causal=False)


@pytest.mark.parametrize("encoding,options", [
    ("path", {"path_forget_gate": True}),
    ("stickbreaking", {"stickbreaking_remainder": "value"}),
    ("stickbreaking", {"stickbreaking_remainder": "bias", "stickbreaking_attend_current": True}),
])
def test_decoding_and_padding_with_the_options(encoding, options):
    """``check_encoding``'s incremental decoding, beam reordering and padding with the
    options the built-in test leaves at their defaults."""
    from fairseq_posenc.testing import check_encoding

    check_encoding(encoding, **options)
