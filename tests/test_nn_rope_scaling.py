"""RoPE scalings through the torch API (``fairseq_posenc/nn.py``): ``PositionStack`` takes a
scaling by the plugin's flags' names and gives the numbers of the plugin's path (a rotation
built with the scaling the plugin's tasks make) and of YaRN's reference; bad values are
named by their Python names."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.encodings.rope import Rope
from fairseq_posenc.core.rope_scaling import RopeScaling
from fairseq_posenc.nn import PositionalSelfAttention, PositionStack
from tests.core.encodings.test_rope_scaling import yarn_theta
from tests.support.user_scalings import registered

YARN = {"rope_scaling": "yarn", "rope_scaling_factor": 4.0, "rope_scaling_original_len": 64}


def stack(encoding: str = "rope", **options) -> PositionStack:
    return PositionStack(encoding, num_layers=2, embed_dim=64, num_heads=2, causal=True,
                         **options)


@pytest.mark.parametrize("encoding", ["rope", "xpos"])
def test_yarn_through_nn_is_the_plugins_and_the_papers(encoding):
    rotation = stack(encoding, **YARN).encodings[0]
    plugin = Rope(head_dim=32, rope_scaling=RopeScaling("yarn", 4.0, 64))  # the tasks' path
    assert torch.equal(rotation.theta, plugin.theta)
    assert rotation.logit_scale == plugin.logit_scale == (0.1 * math.log(4.0) + 1) ** 2
    want = torch.tensor([yarn_theta(i, 32, 10000.0, 4.0, 64) for i in range(16)],
                        dtype=torch.float64)
    assert torch.allclose(rotation.theta, want, rtol=0, atol=1e-15)


def test_a_layer_takes_the_scaling_and_changes_its_output():
    torch.manual_seed(0)
    x = torch.randn(2, 9, 64, dtype=torch.float64)
    outputs = []
    for options in ({}, YARN):
        torch.manual_seed(1)
        layer = PositionalSelfAttention(64, 2, "rope", causal=True, **options).double()
        outputs.append(layer(x))
    assert (outputs[0] - outputs[1]).abs().max() > 1e-6


def test_llama3_options_and_a_users_scaling_by_keyword(tmp_path):
    rotation = stack(rope_scaling="llama3", rope_scaling_factor=4.0,
                     rope_scaling_original_len=64, rope_scaling_low_freq_factor=0.5,
                     rope_scaling_high_freq_factor=8.0).encodings[0]
    want = RopeScaling("llama3", 4.0, 64, {"rope_scaling_low_freq_factor": 0.5,
                                           "rope_scaling_high_freq_factor": 8.0})
    assert torch.equal(rotation.theta, want.frequencies(32, 10000.0))
    with registered(tmp_path) as name:
        rotation = stack(rope_scaling=name, rope_scaling_factor=4.0,
                         test_scale_power=1.0).encodings[0]
        assert torch.equal(rotation.theta, Rope(head_dim=32).theta / 4.0)


@pytest.mark.parametrize("encoding,options,message", [
    ("rope", {**YARN, "rope_scaling_factor": 0.5}, "rope_scaling_factor must be at least 1"),
    ("rope", {"rope_scaling": "cubic", "rope_scaling_factor": 2.0},
     "rope_scaling must be one of linear, ntk, yarn, llama3, dynamic, got 'cubic'"),
    ("rope", {"rope_scaling": "yarn", "rope_scaling_factor": 2.0},
     "rope_scaling='yarn' needs the training length: give rope_scaling_original_len=N"),
    ("rope", {"rope_scaling_factor": 2.0}, "rope_scaling_factor go with rope_scaling"),
    ("rope", {**YARN, "rope_scaling_low_freq_factor": 1.0},
     "rope_scaling_low_freq_factor are read by rope_scaling llama3 only"),
    ("t5", {"rope_scaling": "linear", "rope_scaling_factor": 2.0},
     "'t5' has none; the encodings that read it: rope, xpos"),
])
def test_bad_scalings_are_named_by_their_python_names(encoding, options, message):
    with pytest.raises(ValueError, match=message):
        stack(encoding, **options)
