"""RoPE rescaled at translation time (``fairseq_posenc/core/rope_scaling.py``) against the
papers' definitions written out in float64: position interpolation as positions ``m / s``
(Chen et al. 2023), NTK-aware scaling as RoPE with the base ``b s^(d/(d-2))``, YaRN's
frequencies pair by pair from its ramp over ``r = L / lambda`` and its temperature
``sqrt(1/t) = 0.1 ln s + 1`` (Peng et al. 2023); the flags' checks; and the tasks that
carry the flags to a model loaded from a checkpoint.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.plugin import build
from fairseq_posenc.core.encodings.rope import Rope
from fairseq_posenc.plugin.extrapolation import (TranslationExtrapolationConfig,
                                          TranslationExtrapolationTask)
from fairseq_posenc.core.rope_scaling import RopeScaling
from tests.support.model_utils import build_attention, dictionary
from tests.support.naive import TOL, naive_attention, run, turn_pairs


def yarn_theta(i: int, d: int, base: float, s: float, length: int) -> float:
    """YaRN's "NTK-by-parts" frequency of pair ``i``: ramp ``gamma`` over the turns
    ``r = L / lambda`` the pair makes in the training length, ``alpha = 1``, ``beta = 32``."""
    theta = base ** (-2 * i / d)
    r = length / (2 * math.pi / theta)
    gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / (32 - 1)
    return (1 - gamma) * theta / s + gamma * theta


def rotated(kind: str, s: float, length: int = 300, base: float = 10000.0):
    """The papers' transformation of a vector at position ``p``."""
    def rotate(vec, p):
        d = vec.numel()
        if kind == "linear":  # positions m -> m / s
            angles = [p / s * base ** (-2 * i / d) for i in range(d // 2)]
        elif kind == "ntk":  # RoPE with the base b' = b s^(d / (d - 2))
            angles = [p * (base * s ** (d / (d - 2))) ** (-2 * i / d) for i in range(d // 2)]
        else:
            angles = [p * yarn_theta(i, d, base, s, length) for i in range(d // 2)]
        return turn_pairs(vec, angles)
    return rotate


def flags(kind: str, s: float, length=None) -> dict:
    """What the plugin's tasks give a stack's build: the structural ``rope_scaling``."""
    return {"rope_scaling": RopeScaling(kind, s, length)}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_scaled_attention_is_the_papers(kind, causal):
    """d_h = 12 and L = 300: YaRN's six pairs make 48, 10, 2.2, 0.5, 0.1 and 0.02 turns over
    L, so the ramp's three parts (kept, ramped, interpolated) all occur."""
    length = 300 if kind == "yarn" else None
    attn = build_attention("rope", causal=causal, embed_dim=12, num_heads=2,
                           **flags(kind, 3.0, length))
    x = torch.randn(7, 2, 12, dtype=torch.float64)
    temperature = (0.1 * math.log(3.0) + 1) ** 2 if kind == "yarn" else 1.0  # 1/t
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: 0.0,
                           rotate=rotated(kind, 3.0), logit_scale=temperature)
    assert (run(attn, x, causal) - want).abs().max() < TOL


def test_yarn_frequencies_pair_by_pair():
    """d_h = 64, L = 512: every pair's frequency and the three parts of the ramp."""
    scaling = RopeScaling("yarn", 4.0, 512)
    got = scaling.frequencies(64, 10000.0)
    want = [yarn_theta(i, 64, 10000.0, 4.0, 512) for i in range(32)]
    assert max(abs(g - w) for g, w in zip(got.tolist(), want)) < 1e-15
    theta = [10000.0 ** (-2 * i / 64) for i in range(32)]
    kept = [i for i in range(32) if want[i] == theta[i]]
    interpolated = [i for i in range(32) if abs(want[i] - theta[i] / 4) < 1e-18]
    assert kept and interpolated and len(kept) + len(interpolated) < 32
    assert scaling.logit_scale == pytest.approx((0.1 * math.log(4.0) + 1) ** 2, abs=1e-15)


def test_factor_one_is_the_trained_model():
    plain = Rope(head_dim=16).theta
    for kind, length in (("linear", None), ("ntk", None), ("yarn", 64)):
        scaling = RopeScaling(kind, 1.0, length)
        assert torch.allclose(scaling.frequencies(16, 10000.0), plain, rtol=0, atol=1e-15)
        assert scaling.logit_scale == 1.0


def test_xpos_rotation_is_rescaled_and_its_decay_kept():
    """xPos with PI: the rotation at m / s, the decay zeta^((n - m)/gamma) as trained."""
    attn = build_attention("xpos", causal=False, embed_dim=8, num_heads=1,
                           **flags("linear", 2.0))
    q, k = torch.randn(2, 1, 1, 5, 8, dtype=torch.float64).unbind(0)
    rq, rk = attn.encoding.rotate_qk(q, k, 0, attn.scope.context)
    rotate = rotated("linear", 2.0)
    for n, m in ((4, 0), (1, 3)):
        decay = [((2 * i / 8 + 0.4) / 1.4) ** ((n - m) / 512) for i in range(4)]
        a, b = rotate(q[0, 0, n], n), rotate(k[0, 0, m], m)
        want = sum(decay[i] * float(a[2 * i:2 * i + 2] @ b[2 * i:2 * i + 2]) for i in range(4))
        assert abs(float(rq[0, 0, n] @ rk[0, 0, m]) - want) < TOL


@pytest.mark.parametrize("args,message", [
    (("linear", 0.5), "--rope-scaling-factor must be at least 1"),
    (("ntk", 2.0, 100),
     "--rope-scaling-original-len is read by --rope-scaling yarn, llama3, dynamic only"),
    (("yarn", 2.0, 0), "--rope-scaling-original-len must be a positive number"),
    (("cubic", 2.0), "--rope-scaling must be one of linear, ntk, yarn, llama3, dynamic"),
])
def test_bad_values_name_the_flag(args, message):
    with pytest.raises(ValueError, match=message):
        RopeScaling(*args)


def test_yarn_without_a_length_and_ntk_with_two_dimensions_say_what_to_do():
    with pytest.raises(ValueError, match="give --rope-scaling-original-len N"):
        RopeScaling("yarn", 2.0).frequencies(8, 10000.0)
    with pytest.raises(ValueError, match="needs a head dimension above 2"):
        RopeScaling("ntk", 2.0).frequencies(2, 10000.0)


# --- the tasks: flags checked before any work, and carried to the checkpoint's model ----


def task_config(**fields) -> TranslationExtrapolationConfig:
    return TranslationExtrapolationConfig(data="/nonexistent", **fields)


@pytest.mark.parametrize("fields,message", [
    ({"rope_scaling": "linear", "rope_scaling_factor": 0.9},
     "--rope-scaling-factor must be at least 1"),
    ({"rope_scaling": "yarn"}, "--rope-scaling yarn needs --rope-scaling-factor S"),
    ({"rope_scaling_factor": 2.0}, "--rope-scaling-factor go with --rope-scaling"),
    ({"rope_scaling_original_len": 20}, "--rope-scaling-original-len go with --rope-scaling"),
])
def test_the_task_refuses_bad_flags_before_reading_anything(fields, message):
    """The data directory does not exist: the check comes first."""
    with pytest.raises(ValueError, match=message):
        TranslationExtrapolationTask.setup_task(task_config(**fields))


def checkpoint_args(encoding: str, **fields):
    """A model configuration as a checkpoint saves it (the training command's namespace)."""
    args = build.model_args(f"transformer_tiny_{encoding}")
    for name, value in fields.items():
        setattr(args, name, value)
    return args


def loaded(task_fields: dict, args, from_checkpoint: bool = True):
    d = dictionary()
    task = TranslationExtrapolationTask(task_config(**task_fields), d, d)
    return task.build_model(args, from_checkpoint=from_checkpoint)


@pytest.mark.parametrize("encoding", ["rope", "xpos"])
def test_yarn_reads_the_training_length_the_checkpoint_records(encoding):
    model = loaded({"rope_scaling": "yarn", "rope_scaling_factor": 4.0},
                   checkpoint_args(encoding, train_max_len=24))
    ropes = [m for m in model.modules() if isinstance(m, Rope)]
    want = torch.tensor([yarn_theta(i, 32, 10000.0, 4.0, 24) for i in range(16)],
                        dtype=torch.float64)  # transformer_tiny: d_h = 32
    assert ropes and all(torch.allclose(m.theta, want, rtol=0, atol=1e-15) for m in ropes)
    assert all(m.logit_scale == pytest.approx((0.1 * math.log(4.0) + 1) ** 2) for m in ropes)


def test_the_flag_overrides_the_recorded_length():
    model = loaded({"rope_scaling": "yarn", "rope_scaling_factor": 4.0,
                    "rope_scaling_original_len": 100}, checkpoint_args("rope", train_max_len=24))
    rope = next(m for m in model.modules() if isinstance(m, Rope))
    assert float(rope.theta[3]) == pytest.approx(yarn_theta(3, 32, 10000.0, 4.0, 100), abs=1e-15)


@pytest.mark.parametrize("encoding,task_fields,fields,from_checkpoint,message", [
    ("rope", {"rope_scaling": "yarn", "rope_scaling_factor": 2.0}, {}, True,
     "--rope-scaling yarn needs the training length: give --rope-scaling-original-len"),
    ("t5", {"rope_scaling": "linear", "rope_scaling_factor": 2.0}, {}, True,
     "checkpoints of --pos-encoding rope or xpos, and this one has --pos-encoding t5"),
    ("rope", {"rope_scaling": "linear", "rope_scaling_factor": 2.0}, {}, False,
     "drop the --rope-scaling flags from fairseq-train"),
])
def test_what_the_checkpoint_decides_is_checked_before_the_model_is_built(
        encoding, task_fields, fields, from_checkpoint, message):
    with pytest.raises(ValueError, match=message):
        loaded(task_fields, checkpoint_args(encoding, **fields), from_checkpoint)


def test_without_scaling_the_model_is_the_trained_one():
    model = loaded({}, checkpoint_args("rope", train_max_len=24))
    rope = next(m for m in model.modules() if isinstance(m, Rope))
    assert rope.scaling is None and torch.equal(rope.theta, Rope(head_dim=32).theta)
