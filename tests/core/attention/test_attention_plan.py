"""The attention planner as a table: which path every encoding's layer takes on CPU and
CUDA, in float32, float16 and bfloat16, in training and in a decoding step. The planner
reads declarations only, so no tensor is computed here (and CUDA needs no GPU: a
``torch.device("cuda")`` is a name). The expected paths are written out from the rules in
``docs/architecture.md``; the other tests check that every path gives the same numbers."""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.context import TRITON_FAMILIES, KernelFamily, PositionScope
from fairseq_posenc.core.encodings import ENCODINGS, get_encoding
from fairseq_posenc.core.encodings.registry import option_values
from fairseq_posenc.core.attention_plan import AttachedPositions, Call, Path, plan_attention
from fairseq_posenc.core.segments import SegmentAttention
from tests.support.model_utils import stack_params

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
LENGTH = 20


def positions(encoding: str, causal: bool, **flags) -> AttachedPositions:
    """The terms of a layer of ``encoding``'s encoder (decoder: ``causal``)."""
    cls = get_encoding(encoding)
    if cls.at_input:
        return AttachedPositions.of(None, PositionScope())
    layer = cls.build_stack(option_values(cls, flags), 1, num_heads=2, head_dim=8,
                            causal=causal, max_positions=64)[0]
    return AttachedPositions.of(layer, PositionScope())


def training(device: torch.device, dtype: torch.dtype, causal: bool, **fields) -> Call:
    """A training forward: padded batch, attention dropout, autograd recording."""
    return Call(device, dtype, LENGTH, LENGTH, causal=causal, padding=True, dropout=True,
                grad=True)._replace(**fields)


def step(device: torch.device, dtype: torch.dtype, k_len: int = LENGTH, **fields) -> Call:
    """A step of beam search: one query, the cache, no padding, no autograd."""
    return Call(device, dtype, 1, k_len, incremental=True)._replace(**fields)


def verified(family, dropout, device, dtype) -> bool:
    """Every Triton family passed its self-check."""
    return True


def described(plan) -> str:
    text = {Path.STEP: "step", Path.SDPA: "sdpa", Path.EXPLICIT: "explicit",
            Path.FUSED_DISTANCE: f"fused {plan.family and plan.family.value}"}[plan.path]
    return text + (" + extra dims" if plan.concatenated else "")


SDPA, EXPLICIT, EXTRA = "sdpa", "explicit", "sdpa + extra dims"
DISTANCE = "fused distance"
#: encoding -> (CPU in any dtype, CUDA float32, CUDA half precision) in training, for the
#: encoder and, where it differs, the decoder.
ENCODER = {
    "none": (SDPA, SDPA, SDPA),
    "sinusoidal": (SDPA, SDPA, SDPA),
    "learned": (SDPA, SDPA, SDPA),
    "shape": (SDPA, SDPA, SDPA),
    # content-free, no parameter: nothing to differentiate in the float mask on CPU; on
    # CUDA such a table takes SDPA's float mask up to FIXED_TABLE_SDPA_MAX_LEN keys
    "alibi": (SDPA, SDPA, SDPA),
    "sandwich": (SDPA, SDPA, SDPA),
    "at5": (EXPLICIT, SDPA, DISTANCE),
    "at5_nob": (EXPLICIT, SDPA, DISTANCE),
    "diet_rel": (EXPLICIT, SDPA, DISTANCE),
    "t5": (EXPLICIT, SDPA, DISTANCE),
    "t5_nob": (EXPLICIT, SDPA, DISTANCE),
    "kerple_log": (EXPLICIT, SDPA, DISTANCE),
    "kerple_power": (EXPLICIT, SDPA, DISTANCE),
    "diet_abs": (EXPLICIT, EXTRA, EXTRA),
    "diet_abs_lin": (EXPLICIT, SDPA, SDPA),  # the encoder's projection
    "huang1": (EXPLICIT, EXPLICIT, "fused distance_factor"),
    "huang2": (EXPLICIT, EXPLICIT, "fused distance_factor"),
    "huang3": (EXPLICIT, EXPLICIT, EXPLICIT),
    "huang4": (EXPLICIT, SDPA, "fused rows"),
    "xl": (EXPLICIT, SDPA, "fused rows"),
    # rotations are applied to q and k before the plan's path (the fused rotation on CUDA
    # in half precision, xPos's decay folded into its complex numbers: Rope.rotate_qk)
    "rope": (SDPA, SDPA, SDPA),
    "xpos": (SDPA, SDPA, SDPA),
    "shaw": (EXPLICIT, EXPLICIT, "fused clipped"),
    "tupe_a": (EXPLICIT, EXTRA, EXTRA),
    # the buckets add a len x len bias on torch's path, which the low-rank term joins
    "tupe_r": (EXPLICIT, SDPA, "fused distance + extra dims"),
    # a learned bias by pair, by distance alone while every position is within its
    # threshold L (512 at first): the distance kernel takes it there
    "fire": (EXPLICIT, SDPA, DISTANCE),
    # content logits: the gates are the logits, written out
    "cope": (EXPLICIT, EXPLICIT, EXPLICIT),
    # gates on the input, both directions: a len x len bias with a gradient (not rank 2)
    "fox": (EXPLICIT, SDPA, SDPA),
}
DECODER = {
    **ENCODER,
    # exactly rank 1 under the causal mask; with attention dropout in half precision, the
    # fused kernel (CAUSAL_CONCAT_MAX_LEN)
    "alibi": (SDPA, EXTRA, DISTANCE),
    "diet_abs_lin": (EXPLICIT, EXTRA, EXTRA),  # the decoder's DIET-ABS
    # c_i - c_j under the causal mask: -c_j (split in two) as extra dimensions on CUDA
    "fox": (EXPLICIT, EXTRA, EXTRA),
    # decoders only: the products of transforms replace q.k, and stick-breaking's weights
    # the softmax, written out
    "path": (EXPLICIT, EXPLICIT, EXPLICIT),
    "stickbreaking": (EXPLICIT, EXPLICIT, EXPLICIT),
}


#: Training with positions chosen per sequence (--random-positions): every term is a
#: (B, H, q, k) tensor read at the drawn distances, so no fused distance kernel and no
#: low-rank dimensions (nor causal ALiBi's); the same in both stacks. (shape, none,
#: diet_abs_lin, fire and cope refuse the option before a model is built; their layers are
#: listed too.)
CHOSEN = {
    "none": (SDPA, SDPA, SDPA),
    "sinusoidal": (SDPA, SDPA, SDPA),
    "learned": (SDPA, SDPA, SDPA),
    "shape": (SDPA, SDPA, SDPA),
    "alibi": (SDPA, SDPA, SDPA),
    "at5": (EXPLICIT, SDPA, SDPA),
    "at5_nob": (EXPLICIT, SDPA, SDPA),
    "diet_rel": (EXPLICIT, SDPA, SDPA),
    "t5": (EXPLICIT, SDPA, SDPA),
    "t5_nob": (EXPLICIT, SDPA, SDPA),
    "diet_abs": (EXPLICIT, SDPA, SDPA),
    "diet_abs_lin": (EXPLICIT, SDPA, SDPA),
    # the factors and Shaw's value term need the logits written out
    "huang1": (EXPLICIT, EXPLICIT, EXPLICIT),
    "huang2": (EXPLICIT, EXPLICIT, EXPLICIT),
    "huang3": (EXPLICIT, EXPLICIT, EXPLICIT),
    "huang4": (EXPLICIT, SDPA, SDPA),
    "xl": (EXPLICIT, SDPA, SDPA),
    "rope": (SDPA, SDPA, SDPA),
    "shaw": (EXPLICIT, EXPLICIT, EXPLICIT),
    "tupe_a": (EXPLICIT, SDPA, SDPA),
    "tupe_r": (EXPLICIT, SDPA, SDPA),
    "kerple_log": (EXPLICIT, SDPA, SDPA),
    "kerple_power": (EXPLICIT, SDPA, SDPA),
    "sandwich": (SDPA, SDPA, SDPA),
    "fire": (EXPLICIT, SDPA, SDPA),
    "cope": (EXPLICIT, EXPLICIT, EXPLICIT),
    "xpos": (SDPA, SDPA, SDPA),
    "fox": (EXPLICIT, SDPA, SDPA),
    "path": (EXPLICIT, EXPLICIT, EXPLICIT),
    "stickbreaking": (EXPLICIT, EXPLICIT, EXPLICIT),
}


def test_the_table_covers_every_encoding():
    assert set(DECODER) == set(CHOSEN) == set(ENCODINGS)
    assert set(ENCODER) == {name for name, cls in ENCODINGS.items() if not cls.causal_only()}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("encoding,causal",
                         stack_params(sorted(ENCODINGS), ids=("encoder", "decoder")))
def test_training_paths(encoding, causal, dtype):
    layer = positions(encoding, causal)
    cpu, cuda32, cuda_half = (DECODER if causal else ENCODER)[encoding]
    got = [described(plan_attention(layer, training(device, dtype, causal),
                                    verified=verified)) for device in (CPU, CUDA)]
    assert got == [cpu, cuda32 if dtype is torch.float32 else cuda_half]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("encoding,causal",
                         stack_params(sorted(ENCODINGS), ids=("encoder", "decoder")))
def test_training_paths_at_chosen_positions(encoding, causal, dtype):
    layer = positions(encoding, causal)
    cpu, cuda32, cuda_half = CHOSEN[encoding]
    plans = [plan_attention(layer, training(device, dtype, causal, chosen_positions=True),
                            verified=verified) for device in (CPU, CUDA)]
    assert [described(plan) for plan in plans] == [
        cpu, cuda32 if dtype is torch.float32 else cuda_half]
    assert all(plan.fused is None and not plan.one_query_rows for plan in plans)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", [CPU, CUDA], ids=str)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_decoder_steps_on_the_step_path(encoding, device, dtype):
    plan = plan_attention(positions(encoding, causal=True), step(device, dtype),
                          verified=verified)
    assert plan.path is Path.STEP and not plan.concatenated and plan.fused is None


@pytest.mark.parametrize("name,flags,call,expected", [
    # evaluation: no gradient, so the CPU keeps the learned bias in SDPA's float mask
    ("t5", {}, training(CPU, torch.float32, False, dropout=False, grad=False), SDPA),
    ("t5", {}, training(CUDA, torch.float16, False, need_weights=True), EXPLICIT),
    # the low-rank term forced into extra dimensions on CPU leaves no float mask to
    # differentiate
    ("diet_abs", {"low_rank_kernel": "concat"}, training(CPU, torch.float32, False), EXTRA),
    ("diet_abs", {"low_rank_kernel": "bias"}, training(CUDA, torch.float16, False), SDPA),
    ("t5", {"distance_kernel": "bias"}, training(CUDA, torch.float16, False), SDPA),
    # the kernels' tests run "fused" on CPU, in Triton's interpreter
    ("t5", {"distance_kernel": "fused"}, training(CPU, torch.float32, False), DISTANCE),
    # 2 x 40 + 1 clipped distances do not fit a tile of 64 keys
    ("shaw", {"shaw_clip": 40}, training(CUDA, torch.float16, False), EXPLICIT),
    ("shaw", {"shaw_clip": 40, "shaw_no_value": True}, training(CUDA, torch.float16, False),
     SDPA),
    ("shaw", {"shaw_no_value": True}, training(CUDA, torch.float16, False), "fused clipped"),
    ("shaw", {"shaw_no_value": True}, training(CUDA, torch.float32, False), SDPA),
    # clips shorter than the sentence: distances share a vector
    ("xl", {"xl_clamp_len": 3}, training(CUDA, torch.float16, False), SDPA),
    ("huang4", {"huang4_clip": 2}, training(CUDA, torch.float16, False), SDPA),
    # a table with no gradient, keys up to 256, with or without dropout: SDPA's float
    # mask, on CUDA
    ("alibi", {}, training(CUDA, torch.float16, False, k_len=256, q_len=256, dropout=False),
     SDPA),
    ("alibi", {}, training(CUDA, torch.float16, False, k_len=256, q_len=256), SDPA),
    ("sandwich", {}, training(CUDA, torch.bfloat16, True, k_len=256, q_len=256,
                              dropout=False), SDPA),
    ("alibi", {}, training(CUDA, torch.float16, False, k_len=257, q_len=257, dropout=False),
     DISTANCE),
    ("sandwich", {}, training(CUDA, torch.float16, True, k_len=257, q_len=257), DISTANCE),
    ("sandwich", {"distance_kernel": "fused"},
     training(CUDA, torch.float16, False, k_len=64, q_len=64, dropout=False), DISTANCE),
    # causal ALiBi: extra dimensions up to 128 keys without dropout, else the fused kernel
    ("alibi", {}, training(CUDA, torch.float16, True, k_len=128, q_len=128, dropout=False),
     EXTRA),
    ("alibi", {}, training(CUDA, torch.bfloat16, True, k_len=129, q_len=129, dropout=False),
     DISTANCE),
    ("alibi", {}, training(CUDA, torch.float16, True, k_len=64, q_len=64), DISTANCE),
    ("alibi", {"low_rank_kernel": "concat"}, training(CUDA, torch.float16, True), EXTRA),
    ("alibi", {"distance_kernel": "bias"}, training(CUDA, torch.float16, True), EXTRA),
    # a chunk of queries after a cache: not the kernel's causality, so extra dimensions
    ("alibi", {}, training(CUDA, torch.float16, True, q_len=3, k_len=300, incremental=True),
     EXTRA),
    # a learned table keeps the kernel: SDPA's mask would need its gradient
    ("t5", {}, training(CUDA, torch.float16, False, k_len=64, q_len=64, dropout=False),
     DISTANCE),
    ("kerple_log", {}, training(CUDA, torch.float16, False, dropout=False), DISTANCE),
    # beyond the rows of causal ALiBi's factors: the bias, in the distance kernel
    ("alibi", {}, training(CUDA, torch.float16, True, q_len=5000, k_len=5000), DISTANCE),
    # a chunk of queries after a cache under a future mask: not the kernel's causality
    ("t5", {}, training(CUDA, torch.float16, True, q_len=3, k_len=10, incremental=True),
     SDPA),
    # steps with padding or weights asked take the general path: one query, explicit
    ("t5", {}, step(CUDA, torch.float16, padding=True), EXPLICIT),
    ("t5", {}, step(CPU, torch.float32, need_weights=True), EXPLICIT),
    ("tupe_r", {"tupe_reset_first": True}, training(CPU, torch.float32, False), EXPLICIT),
    ("tupe_r", {"tupe_reset_first": True}, training(CUDA, torch.float16, False), SDPA),
    # FIRE in evaluation: no gradient, so the CPU keeps its pair bias in SDPA's float mask
    ("fire", {}, training(CPU, torch.float32, False, dropout=False, grad=False), SDPA),
    # FIRE: a table by distance while every key is at a position below L (512): the last
    # key at 511 is; at 512 (a tie: the same bias, not the same gradient into L) and
    # beyond, a bias by pair
    ("fire", {}, training(CUDA, torch.float16, True, q_len=512, k_len=512), DISTANCE),
    ("fire", {}, training(CUDA, torch.bfloat16, False, q_len=513, k_len=513), SDPA),
    ("fire", {"fire_init_l": 16.0}, training(CUDA, torch.float16, False), SDPA),
    ("fire", {"fire_init_l": 19.0}, training(CUDA, torch.float16, True), SDPA),
    ("fire", {"fire_init_l": 19.5}, training(CUDA, torch.float16, True), DISTANCE),
    ("fire", {"distance_kernel": "fused"}, training(CPU, torch.float32, True), DISTANCE),
    ("fire", {"distance_kernel": "fused", "fire_init_l": 18.5},
     training(CPU, torch.float64, True), EXPLICIT),
    ("fire", {"distance_kernel": "bias"}, training(CUDA, torch.float16, True), SDPA),
    # a chunk of queries after a cache under a future mask: not the kernel's causality
    ("fire", {}, training(CUDA, torch.float16, True, q_len=3, k_len=10, incremental=True),
     SDPA),
    # CoPE's gates are its logits: written out where nothing else asks for them
    ("cope", {}, training(CUDA, torch.bfloat16, False, padding=False, dropout=False,
                          grad=False), EXPLICIT),
    # chosen positions: no kernel that assumes consecutive ones, even forced
    ("t5", {"distance_kernel": "fused"},
     training(CPU, torch.float32, False, chosen_positions=True), EXPLICIT),
    ("t5", {"distance_kernel": "fused"},
     training(CUDA, torch.float16, False, chosen_positions=True), SDPA),
    ("diet_abs", {"low_rank_kernel": "concat"},
     training(CUDA, torch.float16, False, chosen_positions=True), SDPA),
    ("alibi", {}, training(CUDA, torch.float16, True, chosen_positions=True), SDPA),
    ("shaw", {"shaw_no_value": True},
     training(CUDA, torch.float16, False, chosen_positions=True), SDPA),
    # one token: the explicit path, its rows read at the drawn distance, not as products
    ("xl", {}, training(CUDA, torch.float16, True, q_len=1, k_len=1,
                        chosen_positions=True), EXPLICIT),
    ("rope", {}, step(CUDA, torch.float16, chosen_positions=True), EXPLICIT),
    # fox's causal sums: extra dimensions on CPU when asked (the CUDA route's CPU form),
    # with a cached prefix, and with or without dropout; the bias when asked, or when
    # weights are
    ("fox", {"low_rank_kernel": "concat"}, training(CPU, torch.float32, True), EXTRA),
    ("fox", {}, training(CUDA, torch.float16, True, q_len=3, k_len=300, incremental=True),
     EXTRA),
    ("fox", {}, training(CUDA, torch.bfloat16, True, dropout=False, q_len=512, k_len=512),
     EXTRA),
    ("fox", {"low_rank_kernel": "bias"}, training(CUDA, torch.float16, True), SDPA),
    ("fox", {}, training(CUDA, torch.float16, True, need_weights=True), EXPLICIT),
    ("fox", {"low_rank_kernel": "concat"}, training(CPU, torch.float32, False), EXPLICIT),
])
def test_other_calls(name, flags, call, expected):
    kernels = {key: flags.pop(key) for key in ("low_rank_kernel", "distance_kernel")
               if key in flags}
    layer = positions(name, call.causal, **flags)
    assert described(plan_attention(layer, call, verified=verified, **kernels)) == expected


def test_fire_reads_its_learned_threshold_once_per_forward_and_stack(monkeypatch):
    """The planner reads L's current value (a parameter, moved by training) on the host:
    once per forward for all the stack's FIRE modules, and again in the next forward."""
    from fairseq_posenc.core.encodings.fire import Fire

    cls = get_encoding("fire")
    scope = PositionScope()
    modules = cls.build_stack(option_values(cls, {}), 3, num_heads=2, head_dim=8,
                              causal=True, max_positions=64)
    layers = [AttachedPositions.of(m, scope) for m in modules]
    reads = []
    threshold = Fire.threshold
    monkeypatch.setattr(Fire, "threshold", lambda self: reads.append(self) or threshold(self))
    call = training(CUDA, torch.float16, True)

    def forward() -> list[str]:
        with scope.open():
            return [described(plan_attention(layer, call, verified=verified))
                    for layer in layers]

    assert forward() == [DISTANCE] * 3 and reads == modules
    with torch.no_grad():  # an update: the second layer's L falls below the last key's 19
        modules[1].l_multiplier.fill_(18.9 / 512)
    reads.clear()
    assert forward() == [DISTANCE, SDPA, DISTANCE] and reads == modules


def test_a_kernel_that_failed_its_check_is_not_used():
    layer = positions("t5", causal=False)
    asked = []

    def refused(family, dropout, device, dtype):
        asked.append((family, dropout, device, dtype))
        return False

    plan = plan_attention(layer, training(CUDA, torch.bfloat16, False), verified=refused)
    assert plan.path is Path.SDPA
    # the variant with attention dropout, on the call's device and dtype
    assert asked == [(KernelFamily.DISTANCE, True, CUDA, torch.bfloat16)]


def test_segment_attention_beside_an_input_encoding():
    layer = AttachedPositions.of(None, PositionScope(), [SegmentAttention(2, 3)])
    got = [described(plan_attention(layer, training(device, dtype, False),
                                    verified=verified))
           for device, dtype in ((CPU, torch.float32), (CUDA, torch.float32),
                                 (CUDA, torch.float16))]
    assert got == [EXPLICIT, SDPA, SDPA]


def test_mask_gradient():
    """The float mask has a gradient where a term in it is learned or reads q or k."""
    for name, expected in [("t5", True), ("alibi", False), ("xl", True), ("rope", False),
                           ("fire", True)]:
        plan = plan_attention(positions(name, causal=False),
                              training(CUDA, torch.float32, False), verified=verified)
        assert plan.mask_needs_grad is expected, name


@pytest.mark.parametrize("name,flags,covered", [
    ("xl", {}, True), ("huang4", {}, True),
    ("xl", {"xl_clamp_len": 3}, False), ("huang4", {"huang4_clip": 2}, False),
    ("t5", {}, False),
])
def test_a_step_reads_rows_as_products_unless_clipped(name, flags, covered):
    layer = positions(name, causal=True, **flags)
    plan = plan_attention(layer, step(CUDA, torch.float16))
    assert plan.path is Path.STEP
    assert plan.one_query_rows == (layer.terms if covered else ())


def test_self_checks_are_keyed_by_the_declared_families():
    """Every Triton family a term declares has a self-check, with and without dropout
    (rotary: without), and every self-check is of a family."""
    from fairseq_posenc.core.kernels.self_check import CHECKS, FALLBACKS

    declared = set()
    for case in stack_params(ENCODINGS):
        name, causal = case.values
        for term in positions(name, causal).terms:
            if term.fused_kernel is not None:
                declared.add(term.fused_kernel.family)
    assert declared >= set(TRITON_FAMILIES)
    assert {family for family, _ in CHECKS} == set(TRITON_FAMILIES) == set(FALLBACKS)
    for family in declared & set(TRITON_FAMILIES):
        assert (family, False) in CHECKS
        assert ((family, True) in CHECKS) is (family is not KernelFamily.ROTARY)


@pytest.fixture
def users_distance_bias():
    """A distance bias written as a user would, registered for one test."""
    from tests.support.user_encodings import registered

    with registered() as name:
        yield name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_a_users_distance_bias_is_planned_as_t5(users_distance_bias, causal, dtype):
    """Its kind is all the planner reads: the rows of t5, a learned table by distance
    (the fused distance kernel on CUDA in half precision), and decoding steps on the step
    path."""
    layer = positions(users_distance_bias, causal)
    got = [described(plan_attention(layer, training(device, dtype, causal),
                                    verified=verified)) for device in (CPU, CUDA)]
    assert got == [EXPLICIT, SDPA if dtype is torch.float32 else DISTANCE]
    for device in (CPU, CUDA):
        plan = plan_attention(positions(users_distance_bias, True), step(device, dtype),
                              verified=verified)
        assert plan.path is Path.STEP and plan.fused is None
