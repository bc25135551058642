"""The registry of RoPE scalings (``fairseq_posenc/core/rope_scaling_registry.py``): a user's
scaling registered as the built-ins are, its options declared and checked as an encoding's,
and the registrations it refuses with a message that says what to do."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

from fairseq_posenc.core.rope_scaling import RopeScaling, scaling_from_values
from fairseq_posenc.core.rope_scaling_registry import (ROPE_SCALINGS, Scaled, Unscaled,
                                                       register_rope_scaling)
from tests.support.user_scalings import registered


def test_the_built_in_scalings_are_registered_in_order():
    assert list(ROPE_SCALINGS)[:5] == ["linear", "ntk", "yarn", "llama3", "dynamic"]
    assert [o.name for o in ROPE_SCALINGS["llama3"].options] == [
        "rope_scaling_low_freq_factor", "rope_scaling_high_freq_factor"]
    assert [n for n, s in ROPE_SCALINGS.items() if s.per_sequence] == ["dynamic"]


def test_a_user_scaling_gives_its_frequencies_and_its_options_are_checked(tmp_path):
    with registered(tmp_path) as name:
        theta = Unscaled.of(16, 10000.0).theta
        got = RopeScaling(name, 4.0, None, {"test_scale_power": 0.5}).frequencies(16, 10000.0)
        assert torch.equal(got, theta / 2.0)
        assert torch.equal(RopeScaling(name, 4.0).frequencies(16, 10000.0), theta / 2.0)
        for options, message in (
                ({"test_scale_power": -1.0}, "--test-scale-power must be at least 0, got -1.0"),
                ({"test_scale_power": "x"}, "--test-scale-power must be a float, got 'x'"),
                ({"test_scale_power": 2.0}, "--test-scale-power must be at most 1"),
                ({"rope_scaling_low_freq_factor": 1.0},
                 "--rope-scaling-low-freq-factor are read by --rope-scaling llama3 only; drop "
                 "them from --rope-scaling power")):
            with pytest.raises(ValueError, match=message):
                RopeScaling(name, 4.0, None, options)
        with pytest.raises(ValueError, match="--test-scale-power are read by --rope-scaling "
                                             "power only; drop them from --rope-scaling yarn"):
            scaling_from_values({"rope_scaling": "yarn", "rope_scaling_factor": 2.0,
                                 "test_scale_power": 0.25})
    assert name not in ROPE_SCALINGS


def test_a_name_registered_already_is_refused():
    with pytest.raises(ValueError, match="the RoPE scaling 'yarn' is registered already, by "
                                         "fairseq_posenc.core.rope_scalings.yarn: choose "
                                         "another name"):
        @register_rope_scaling("yarn")
        def yarn(rope, factor, original_len, lengths) -> Scaled:
            return Scaled(rope.theta)
    assert ROPE_SCALINGS["yarn"].function.__module__ == "fairseq_posenc.core.rope_scalings"


@pytest.mark.parametrize("define,message", [
    (lambda: lambda rope, factor: Scaled(rope.theta),
     r"takes \(rope, factor, original_len, lengths\) and then its options by keyword only"),
    (lambda: lambda rope, factor, original_len, lengths, width=2: None,
     "takes .* and then its options by keyword only"),
])
def test_a_function_of_another_signature_is_refused(define, message):
    with pytest.raises(TypeError, match=message):
        register_rope_scaling("test_bad_signature")(define())
    assert "test_bad_signature" not in ROPE_SCALINGS


def test_options_are_declared_as_an_encodings_are():
    def no_default(rope, factor, original_len, lengths, *, test_width: int) -> Scaled:
        return Scaled(rope.theta)

    def not_an_option(rope, factor, original_len, lengths, *,
                      test_width: list = None) -> Scaled:  # type: ignore[assignment]
        return Scaled(rope.theta)

    def common(rope, factor, original_len, lengths, *,
               rope_scaling_factor: Optional[float] = None) -> Scaled:
        return Scaled(rope.theta)

    for function, error, message in (
            (no_default, TypeError, "argument 'test_width' is an option and needs a default"),
            (not_an_option, TypeError, "an option is an int, float, str, bool"),
            (common, ValueError, "is a flag every scaling shares .* name it after the "
                                 "scaling")):
        with pytest.raises(error, match=message):
            register_rope_scaling("test_declared")(function)
    assert "test_declared" not in ROPE_SCALINGS
