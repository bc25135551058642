"""KERPLE's two kernels (Chi et al. 2022, sec. 4) and Sandwich (Chi et al. 2023)
against naive loops written from the papers' formulas (``support/naive.py``: plain Python
over batch, head, query and key; float64, tolerance 1e-9), and the authors'
parametrization: the projection onto the constraints, the initial ranges, sharing.

Sandwich's reference takes the inner product of the two sinusoidal embeddings
``p_m = [sin(m w_k), cos(m w_k)]_k`` themselves, not the ``cos`` of the difference the code
sums, and adds no ``- D/2``: a constant per head, which the softmax must not see.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.encodings.kerple_log import KERNEL_EPS
from tests.support.model_utils import build_attention, build_model
from tests.support.naive import TOL, naive_attention, run


def set_parameters(attn, r1, r2) -> None:
    with torch.no_grad():
        attn.encoding.r1.copy_(torch.tensor(r1, dtype=torch.float64))
        attn.encoding.r2.copy_(torch.tensor(r2, dtype=torch.float64))


#: The papers' kernels, written from sec. 4: (r1, r2) per head -> bias of |i - j|.
KERNELS = {
    "kerple_log": lambda r1, r2, r: -r1 * math.log(1 + r2 * r),
    "kerple_power": lambda r1, r2, r: -r1 * r ** r2,
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("encoding,r1,r2", [("kerple_log", [0.7, 2.3], [0.05, 1.6]),
                                            ("kerple_power", [0.4, 1.9], [0.3, 2.0])])
def test_kerple_attention(encoding, r1, r2, causal):
    attn = build_attention(encoding, causal=causal)
    set_parameters(attn, r1, r2)
    x = torch.randn(9, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q:
                           KERNELS[encoding](r1[h], r2[h], abs(i - j)))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def sinusoid(m: int, dim: int) -> list[float]:
    """The sinusoidal embedding of position ``m``: a sine and a cosine per frequency
    ``w_k = 10000^(-2k/D)``, ``k = 1..D/2``."""
    out = []
    for k in range(1, dim // 2 + 1):
        w = 10000 ** (-2 * k / dim)
        out += [math.sin(m * w), math.cos(m * w)]
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_heads,dim", [(2, 128), (4, 6)])
def test_sandwich_attention(causal, num_heads, dim):
    attn = build_attention("sandwich", causal=causal, embed_dim=2 * num_heads,
                           num_heads=num_heads, sandwich_dim=dim)
    T = 9
    p = [sinusoid(m, dim) for m in range(T)]
    x = torch.randn(T, 2, 2 * num_heads, dtype=torch.float64)
    # p_i.p_j divided by the paper's h = 8n/H for head n = 1..H
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: sum(
        a * c for a, c in zip(p[i], p[j])) / (8 * (h + 1) / num_heads))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def test_sandwich_table_is_zero_at_distance_zero_and_symmetric():
    """The ``- D/2`` only moves each head's bias by a constant: 0 at distance 0."""
    attn = build_attention("sandwich", causal=False, sandwich_dim=16)
    table = attn.encoding.distance_bias(-50, 50)
    assert table.dtype == torch.float64 and table.shape == (2, 101)
    assert table[:, 50].abs().max() == 0
    assert torch.equal(table, table.flip(-1))
    assert (table[:, :50] < 0).all()


@pytest.mark.parametrize("encoding,r2_max", [("kerple_log", None), ("kerple_power", 2.0)])
def test_kerple_projects_its_parameters_onto_the_constraint(encoding, r2_max):
    """As the authors' code: r1, r2 >= 0.01 (and r2 <= 2 for the power kernel), clamped in
    place before they are used, so that the optimizer continues from there; the attention
    is the formula's at the projected values, and the gradient reaches both parameters."""
    attn = build_attention(encoding, causal=False)
    set_parameters(attn, [-0.5, 1.2], [3.5, -1.0])
    attn.train()
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    out = run(attn, x, causal=False)
    r2_top = 3.5 if r2_max is None else r2_max
    assert attn.encoding.r1.tolist() == [KERNEL_EPS, 1.2]
    assert attn.encoding.r2.tolist() == [r2_top, KERNEL_EPS]
    r1, r2 = [KERNEL_EPS, 1.2], [r2_top, KERNEL_EPS]
    want = naive_attention(attn, x, False, lambda b, h, i, j, q:
                           KERNELS[encoding](r1[h], r2[h], abs(i - j)))
    assert (out - want).abs().max() < TOL
    out.square().sum().backward()
    for p in (attn.encoding.r1, attn.encoding.r2):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().min() > 0


@pytest.mark.parametrize("encoding,r1_top,r2_top", [("kerple_log", 2.0, 1.0),
                                                     ("kerple_power", 1.0, 2.0)])
def test_kerple_initialisation_is_the_authors(encoding, r1_top, r2_top):
    """r1 ~ U(0, 2), r2 ~ U(0, 1) for the logarithm; r1 ~ U(0, 1), r2 ~ U(0, 2) for the
    power (chijames/KERPLE: ``bias_p`` from U(0, 2), ``bias_a`` from U(0, 1))."""
    from fairseq_posenc.core.encodings import get_encoding
    torch.manual_seed(0)
    term = get_encoding(encoding)(num_heads=4096)
    for values, top in ((term.r1, r1_top), (term.r2, r2_top)):
        assert 0 <= values.min() and values.max() <= top
        assert abs(values.mean().item() - top / 2) < 0.02 * top


@pytest.mark.parametrize("encoding", ["kerple_log", "kerple_power", "sandwich"])
def test_one_module_per_stack_shared_by_its_layers(encoding):
    """KERPLE: the paper's Figure 1 and the authors' code share r1, r2 across layers;
    Sandwich has no parameters and the same bias in every layer."""
    model, _ = build_model(encoding)
    for stack in (model.encoder, model.decoder):
        terms = {id(layer.self_attn.encoding) for layer in stack.layers}
        assert len(terms) == 1 and len(stack.pos_encodings) == 1


@pytest.mark.parametrize("encoding", ["kerple_log", "kerple_power", "sandwich"])
def test_half_precision_parameters_give_a_finite_float32_table(encoding):
    """|r|^2 at r = 1023 is past half precision's range: the table is float32."""
    from fairseq_posenc.core.encodings import get_encoding
    cls = get_encoding(encoding)
    term = (cls(num_heads=8, sandwich_dim=128) if encoding == "sandwich"
            else cls(num_heads=8)).half()
    if encoding == "kerple_power":
        with torch.no_grad():
            term.r2.fill_(2.0)
    table = term.distance_bias(-1023, 1023)
    assert table.dtype == torch.float32 and torch.isfinite(table).all()


@pytest.mark.parametrize("value,message", [
    ("7", "--sandwich-dim must be a positive even number, got 7. The paper uses 128."),
    ("0", "--sandwich-dim must be at least 2, got 0. The paper uses 128."),
])
def test_a_bad_sandwich_dim_says_what_to_do(value, message):
    with pytest.raises(ValueError) as error:
        build_model("sandwich", ["--sandwich-dim", value])
    assert str(error.value) == message
