"""``register_encoding``: a user's encoding, declared in one class, reaches the torch API and
the plugin's flags; a class the registry cannot use is refused, naming it, and so is what a
kind asks a class to declare (an ``InputEmbedding``'s ``fairseq_flags``, a ``LowRank``'s
``max_len``): at registration where the class shows it, else when the layer is built,
before any forward (where it was an ``AttributeError`` in training)."""

from __future__ import annotations

import argparse
import re
from typing import Annotated, Literal, Optional

import pytest
import torch

from fairseq_posenc import nn as posenc
from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.core.encodings.options import declared_options
from fairseq_posenc.nn import (DistanceBias, InputEmbedding, LowRank, Option, PairBias,
                               register_encoding)


class Decay(DistanceBias):
    """``-|j - i| / w`` per head, ``w`` an option."""

    name = "test_registry_decay"

    def __init__(self, *, num_heads: int, test_registry_width: Annotated[float, Option(
            "the decay's width", metavar="W")] = 4.0,
                 test_registry_mode: Literal["abs", "square"] = "abs",
                 test_registry_clip: Annotated[Optional[int], Option(
                     "clip", minimum=1)] = None,
                 test_registry_off: bool = False) -> None:
        super().__init__()
        self.width, self.heads = test_registry_width, num_heads

    def distance_bias(self, r_lo: int, r_hi: int) -> torch.Tensor:
        r = torch.arange(r_lo, r_hi + 1, dtype=torch.float32)
        return (-r.abs() / self.width).expand(self.heads, -1)


@pytest.fixture
def registered():
    """Classes registered in a test, removed afterwards."""
    names: list[str] = []

    def register(cls):
        register_encoding(cls)
        names.append(cls.name)
        return cls

    try:
        yield register
    finally:
        for name in names:
            ENCODINGS.pop(name, None)


def test_options_are_read_off_the_constructor():
    options = {option.name: option for option in declared_options(Decay)}
    assert list(options) == ["test_registry_width", "test_registry_mode", "test_registry_clip",
                             "test_registry_off"]
    width = options["test_registry_width"]
    assert (width.type, width.default, width.help, width.metavar) == (float, 4.0,
                                                                    "the decay's width", "W")
    assert options["test_registry_mode"].choices == ("abs", "square")
    assert options["test_registry_clip"].optional and options["test_registry_clip"].minimum == 1
    assert options["test_registry_off"].type is None  # a switch


def test_a_users_encoding_reaches_the_torch_api(registered):
    registered(Decay)
    assert posenc.encoding_options(Decay.name) == {
        "test_registry_width": 4.0, "test_registry_mode": "abs", "test_registry_clip": None,
        "test_registry_off": False}
    attn = posenc.PositionalSelfAttention(8, 2, Decay.name, causal=True, test_registry_width=2.0)
    assert attn.position_encoding.width == 2.0
    x = torch.randn(2, 5, 8, requires_grad=True)
    attn(x).sum().backward()
    assert x.grad is not None
    with pytest.raises(ValueError, match="test_registry_clip must be a positive integer"):
        posenc.PositionalSelfAttention(8, 2, Decay.name, causal=True, test_registry_clip=0)
    with pytest.raises(ValueError, match="test_registry_mode must be one of 'abs', 'square'"):
        posenc.PositionalSelfAttention(8, 2, Decay.name, causal=True, test_registry_mode="x")
    with pytest.raises(TypeError, match=r"'shaw_clip' \(an option of shaw\)"):
        posenc.PositionalSelfAttention(8, 2, Decay.name, causal=True, shaw_clip=2)


def test_a_users_options_are_flags_of_the_plugin(registered):
    registered(Decay)
    from fairseq_posenc.plugin.position_args import add_position_args, encoding_values

    parser = argparse.ArgumentParser()
    add_position_args(parser)
    args = parser.parse_args(["--pos-encoding", Decay.name, "--test-registry-width", "2.5",
                              "--test-registry-mode", "square", "--test-registry-off"])
    assert encoding_values(args, Decay) == {
        "test_registry_width": 2.5, "test_registry_mode": "square", "test_registry_clip": None,
        "test_registry_off": True}
    help_text = parser.format_help()
    assert "--test-registry-width W" in help_text and "the decay's width" in help_text


def test_refusals_name_the_class(registered):
    class NoMethod(DistanceBias):
        name = "test_registry_no_method"

    with pytest.raises(TypeError, match="NoMethod derives from DistanceBias but does not "
                                        "implement distance_bias: a DistanceBias implements "
                                        "distance_bias"):
        register_encoding(NoMethod)

    class Again(Decay):
        name = "t5"

    with pytest.raises(ValueError, match="Again: the encoding name 't5' is registered already, "
                                         "by .*T5"):
        register_encoding(Again)

    class Unannotated(PairBias):
        name = "test_registry_unannotated"

        def __init__(self, *, num_heads, scale=1.0):
            super().__init__()

        def pair_bias(self, *args):
            raise NotImplementedError

    with pytest.raises(TypeError, match="Unannotated.__init__'s argument 'scale' has no "
                                        "type annotation"):
        register_encoding(Unannotated)

    class NoDefault(Decay):
        name = "test_registry_no_default"

        def __init__(self, *, num_heads: int, test_registry_need: int) -> None:
            super().__init__(num_heads=num_heads)

    with pytest.raises(TypeError, match="argument 'test_registry_need' is an option and needs a "
                                        "default"):
        register_encoding(NoDefault)

    class OnSwitch(Decay):
        name = "test_registry_on_switch"

        def __init__(self, *, num_heads: int, test_registry_on: bool = True) -> None:
            super().__init__(num_heads=num_heads)

    with pytest.raises(TypeError, match="is a switch and must default to False"):
        register_encoding(OnSwitch)

    class Clash(Decay):
        name = "test_registry_clash"

        def __init__(self, *, num_heads: int, shaw_clip: int = 3) -> None:
            super().__init__(num_heads=num_heads)

    with pytest.raises(ValueError, match="Clash's option 'shaw_clip' is also an option of "
                                         ".*Shaw \\('shaw'\\), declared differently"):
        register_encoding(Clash)

    assert not {name for name in ENCODINGS if name.startswith("test_registry")}


def test_an_input_embedding_without_fairseq_flags_is_refused(registered):
    class NoFlags(InputEmbedding):
        name = "test_registry_no_flags"

    class IntFlags(InputEmbedding):
        name = "test_registry_int_flags"
        fairseq_flags = (0, 1)

    for cls, got in ((NoFlags, "has none"), (IntFlags, "got (0, 1)")):
        with pytest.raises(TypeError, match=re.escape(
                f"{cls.__qualname__} is an InputEmbedding and needs the class attribute "
                "fairseq_flags = (no_token_positional_embeddings, learned_pos), the fairseq "
                "input embedding it configures: (False, False) sinusoidal, (False, True) "
                f"learned, (True, False) none; {got}")):
            register_encoding(cls)
        assert cls.name not in ENCODINGS

    class LearnedAgain(InputEmbedding):
        name = "test_registry_learned_again"
        fairseq_flags = (False, True)

    registered(LearnedAgain)
    embedding = posenc.PositionEmbedding(LearnedAgain.name, 8, max_len=16)
    assert embedding.weight.shape == (16, 8)  # fairseq's learned table, as "learned"


class Products(LowRank):
    """``P[h, p_i] . P[h, p_j]``, ``P`` of rank 2."""

    name = "test_registry_products"

    def __init__(self, *, num_heads: int, max_positions: int) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(num_heads, max_positions, 2))
        self.max_len = max_positions

    def factors(self, length, ctx):
        return self.p[:, :length], self.p[:, :length]


def test_a_low_rank_term_without_max_len_is_refused(registered):
    class Constant(LowRank):  # no constructor: nothing sets max_len
        name = "test_registry_constant"

        def factors(self, length, ctx):
            return torch.ones(1, length, 1), torch.ones(1, length, 1)

    with pytest.raises(TypeError, match="Constant is a LowRank without max_len: set the "
                                        "number of absolute positions its factors cover, as a "
                                        "class attribute max_len or as self.max_len in its "
                                        "__init__"):
        register_encoding(Constant)

    class Forgets(Products):
        name = "test_registry_forgets"

        def __init__(self, *, num_heads: int, max_positions: int) -> None:
            super().__init__(num_heads=num_heads, max_positions=max_positions)
            del self.max_len

    registered(Forgets)  # its constructor could set it: checked when it is built
    with pytest.raises(TypeError, match=re.escape(
            f"{__name__}.test_a_low_rank_term_without_max_len_is_refused.<locals>.Forgets is "
            "a LowRank term and needs max_len, the number of absolute positions its factors "
            "cover, a positive int: set self.max_len in its __init__ (from the stack's "
            "max_positions, or an option); has none")):
        posenc.PositionalSelfAttention(8, 2, Forgets.name, causal=True, max_len=16)

    class Constant64(Constant):
        name = "test_registry_constant_64"
        max_len = 64

    for cls in (registered(Products), registered(Constant64)):
        attn = posenc.PositionalSelfAttention(8, 2, cls.name, causal=True, max_len=16)
        assert attn(torch.randn(2, 5, 8)).shape == (2, 5, 8)


def test_an_option_named_as_a_fairseq_flag_is_refused(registered):
    """``dropout`` would be ``--dropout``, which fairseq-train has: every command that loads
    the plugin would stop with argparse's conflict."""
    import fairseq_posenc

    fairseq_posenc.register()  # the plugin's check is there once fairseq is loaded

    class Dropout(Decay):
        name = "test_registry_dropout"

        def __init__(self, *, num_heads: int, dropout: float = 0.1) -> None:
            super().__init__(num_heads=num_heads)

    with pytest.raises(ValueError, match="Dropout: option --dropout is already a flag of "
                                         "fairseq-train"):
        register_encoding(Dropout)
    assert Dropout.name not in ENCODINGS
