"""``fairseq_posenc.nn`` refuses wrong arguments before any work.

Each wrong argument is a ``TypeError`` or ``ValueError`` whose message names the argument
and what it got (the value or shape); a refused call runs no projection and leaves the
cache as it was. The cases are users' reports: a transposed or float padding mask (which
gave wrong numbers without a word), a negative offset (which read the table from its
end), a cache given to a non-causal layer, and torch's own errors (a division by zero,
a failed view, an index out of range) where the argument was wrong.
"""

from __future__ import annotations

import pytest
import torch

import fairseq_posenc.nn as posenc
from fairseq_posenc import nn_checks

D, H, B, T = 8, 2, 2, 5


def attention(causal: bool = False, encoding: str = "t5") -> posenc.PositionalSelfAttention:
    return posenc.PositionalSelfAttention(D, H, encoding, causal=causal, max_len=16).eval()


def bool_mask(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bool)


def refused(call, error: type, *pattern: str) -> str:
    """``call()`` raises ``error``, and its message holds each of ``pattern`` verbatim."""
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    for part in pattern:
        assert part in message, message
    return message


class ProjectionCalls:
    """How often the layer's query projection ran: zero when a call is refused first."""

    def __init__(self, layer: posenc.PositionalSelfAttention) -> None:
        self.calls = 0
        layer.q_proj.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))


X = torch.randn(B, T, D)
PADDING = bool_mask(B, T)
PADDING[1, 3:] = True

# (what is wrong, the call's arguments after the layer, the error, what its message names)
FORWARD_CASES = [
    ("mask (time, batch)", (X, PADDING.t()), ValueError,
     ["padding_mask", "(2, 5)", "got shape (5, 2)", "padding_mask.t()"]),
    ("float mask, 1 = keep", (X, (~PADDING).float()), TypeError,
     ["padding_mask", "bool", "True at padding", "torch.float32", "mask == 0"]),
    ("int mask", (X, PADDING.long()), TypeError, ["padding_mask", "torch.int64", "mask.bool()"]),
    ("mask (2, 4)", (X, bool_mask(2, 4)), ValueError, ["padding_mask", "(2, 5)", "(2, 4)"]),
    ("mask (1, 5)", (X, bool_mask(1, 5)), ValueError, ["padding_mask", "(2, 5)", "(1, 5)"]),
    ("mask (2, 5, 1)", (X, bool_mask(2, 5, 1)), ValueError,
     ["padding_mask", "(2, 5)", "(2, 5, 1)"]),
    ("2-D x", (X[0],), ValueError, ["x must be (batch, time, embed_dim=8)", "(5, 8)"]),
    ("x of another width", (torch.randn(B, T, D + 1),), ValueError,
     ["embed_dim=8", "(2, 5, 9)"]),
    ("x without positions", (X[:, :0],), ValueError, ["x has no positions", "(2, 0, 8)"]),
    ("token ids as x", (torch.ones(B, T, D, dtype=torch.long),), TypeError,
     ["x must be a floating-point tensor", "torch.int64"]),
]


@pytest.mark.parametrize("args, error, names", [c[1:] for c in FORWARD_CASES],
                         ids=[c[0] for c in FORWARD_CASES])
def test_forward_refuses_before_any_work(args, error, names):
    layer = attention()
    calls = ProjectionCalls(layer)
    refused(lambda: layer(*args), error, *names)
    assert calls.calls == 0
    assert layer(X, PADDING).shape == X.shape and calls.calls == 1  # the hook counts


def test_a_transposed_square_mask_is_documented_as_undetectable():
    """With batch == time a ``(time, batch)`` mask has the right shape: the docstrings say
    so, since no check can."""
    for doc in (posenc.PositionalSelfAttention.forward.__doc__,
                nn_checks.padding_mask.__doc__):
        assert "batch equals time" in " ".join(doc.split())


def test_a_non_causal_layer_refuses_a_cache():
    layer = attention(causal=False)
    cache = posenc.DecodingCache()
    refused(lambda: layer(X, cache=cache), ValueError, "cache", "causal=False")
    assert len(cache) == 0 and cache.rows is None
    refused(lambda: attention(causal=True)(X, cache={}), TypeError, "cache", "DecodingCache",
            "dict")


def decoding_step(rows: int):
    """A causal layer and a cache holding ``rows`` sequences of 2 positions."""
    layer = attention(causal=True)
    cache = posenc.DecodingCache()
    with torch.no_grad():
        layer(torch.randn(rows, 2, D), cache=cache)
    return layer, cache


def test_a_step_needs_one_row_per_cached_sequence():
    layer, cache = decoding_step(3)
    cache.reorder(torch.tensor([2, 0]))  # beam search dropped a hypothesis
    calls = ProjectionCalls(layer)
    refused(lambda: layer(torch.randn(3, 1, D), cache=cache), ValueError,
            "x has batch 3", "holds 2 sequences", "reorder")
    assert calls.calls == 0 and len(cache) == 2 and cache.rows == 2
    with torch.no_grad():
        assert layer(torch.randn(2, 1, D), cache=cache).shape == (2, 1, D)
    assert len(cache) == 3


@pytest.mark.parametrize("order, error, names", [
    (torch.tensor([0, 5, 1]), ValueError, ["order holds row 5", "3 sequences"]),
    (torch.tensor([-1, 0]), ValueError, ["order holds row -1"]),
    (torch.tensor([0.0, 1.0]), TypeError, ["order", "torch.float32"]),
    (torch.tensor([[0, 1, 2]]), ValueError, ["order must be 1-D", "(1, 3)"]),
    ([0, 1], TypeError, ["order", "list"]),
], ids=["row out of range", "negative row", "float", "2-D", "list"])
def test_reorder_refuses_what_is_no_row_index(order, error, names):
    layer, cache = decoding_step(3)
    before = {name: value.clone() for name, value in cache.buffer(layer).items()
              if value is not None}
    refused(lambda: cache.reorder(order), error, *names)
    after = cache.buffer(layer)
    assert all(torch.equal(after[name], value) for name, value in before.items())


CONSTRUCTOR_CASES = [
    ("num_heads=0", lambda: posenc.PositionalSelfAttention(D, 0, "t5", causal=False),
     ValueError, ["num_heads must be a positive int", "got 0"]),
    ("num_heads=0, plain", lambda: posenc.PositionalSelfAttention(D, 0, None, causal=False),
     ValueError, ["num_heads", "got 0"]),
    ("num_heads=2.0", lambda: posenc.PositionalSelfAttention(D, 2.0, "t5", causal=False),
     TypeError, ["num_heads must be an int", "2.0"]),
    ("embed_dim=0", lambda: posenc.PositionalSelfAttention(0, H, "t5", causal=False),
     ValueError, ["embed_dim", "got 0"]),
    ("embed_dim 9, 2 heads, plain", lambda: posenc.PositionalSelfAttention(9, 2, None,
                                                                           causal=False),
     ValueError, ["embed_dim 9", "num_heads 2"]),
    ("max_len=0", lambda: posenc.PositionalSelfAttention(D, H, "diet_abs", causal=False,
                                                         max_len=0),
     ValueError, ["max_len must be a positive int", "got 0"]),
    ("causal='yes'", lambda: posenc.PositionalSelfAttention(D, H, "t5", causal="yes"),
     TypeError, ["causal must be True or False", "'yes'"]),
    ("layer with a name", lambda: posenc.PositionalSelfAttention(D, H, "t5", causal=False,
                                                                 layer=1),
     ValueError, ["layer is an index into a PositionStack", "got 1", "'t5'"]),
    ("stack of 0 layers", lambda: posenc.PositionStack("t5", num_layers=0, embed_dim=D,
                                                       num_heads=H, causal=True),
     ValueError, ["num_layers must be a positive int", "got 0"]),
    ("stack, max_len=0", lambda: posenc.PositionStack("shaw", num_layers=2, embed_dim=D,
                                                      num_heads=H, causal=True, max_len=0),
     ValueError, ["max_len", "got 0"]),
    ("stack, num_heads=0", lambda: posenc.PositionStack("t5", num_layers=2, embed_dim=D,
                                                        num_heads=0, causal=True),
     ValueError, ["num_heads", "got 0"]),
    ("embedding, max_len=0", lambda: posenc.PositionEmbedding("learned", D, max_len=0),
     ValueError, ["max_len", "got 0"]),
    ("embedding, embed_dim=0", lambda: posenc.PositionEmbedding("learned", 0),
     ValueError, ["embed_dim", "got 0"]),
    ("sinusoids of width 2", lambda: posenc.PositionEmbedding("sinusoidal", 2),
     ValueError, ["'sinusoidal' needs embed_dim of at least 4", "got 2"]),
    ("shape of width 3", lambda: posenc.PositionEmbedding("shape", 3),
     ValueError, ["'shape'", "embed_dim", "got 3"]),
    ("unknown encoding", lambda: posenc.PositionEmbedding("sinusoid", D),
     ValueError, ["unknown encoding 'sinusoid'", "sinusoidal"]),
]


@pytest.mark.parametrize("build, error, names", [c[1:] for c in CONSTRUCTOR_CASES],
                         ids=[c[0] for c in CONSTRUCTOR_CASES])
def test_constructors_refuse_wrong_sizes(build, error, names):
    refused(build, error, *names)


@pytest.mark.parametrize("layer, names", [(2, ["layer 2 is out of range", "2 layers"]),
                                          (-1, ["layer must be", "got -1"])])
@pytest.mark.parametrize("encoding", ["t5", "shaw"])  # one shared module; one per layer
def test_a_stack_layer_out_of_range(encoding, layer, names):
    stack = posenc.PositionStack(encoding, num_layers=2, embed_dim=D, num_heads=H, causal=True)
    refused(lambda: posenc.PositionalSelfAttention(D, H, stack, layer=layer, causal=True),
            ValueError, *names)
    refused(lambda: stack.layer(layer), ValueError, *names)


@pytest.mark.parametrize("call, error, names", [
    (lambda e: e(X, offset=-1), ValueError, ["offset must be an int of at least 0", "got -1"]),
    (lambda e: e(X, offset=1.5), TypeError, ["offset must be an int", "1.5"]),
    (lambda e: e(X, (~PADDING).float()), TypeError, ["padding_mask", "torch.float32"]),
    (lambda e: e(X, PADDING.t()), ValueError, ["padding_mask", "got shape (5, 2)"]),
    (lambda e: e(X, bool_mask(2, 5, 1)), ValueError, ["padding_mask", "(2, 5, 1)"]),
    (lambda e: e(torch.zeros(T)), ValueError, ["x must be (batch, time, ...)", "(5,)"]),
    (lambda e: e(torch.ones(B, T, dtype=torch.long)), TypeError, ["x", "torch.int64"]),
], ids=["negative offset", "float offset", "float mask", "mask (time, batch)",
        "mask (2, 5, 1)", "1-D x", "token ids"])
@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "shape"])
def test_the_embedding_refuses_wrong_calls(encoding, call, error, names):
    embedding = posenc.PositionEmbedding(encoding, D, max_len=16).train()
    refused(lambda: call(embedding), error, *names)


def test_the_embedding_at_offset_zero_and_more_is_unchanged():
    """The offsets it accepts read the rows they name: the sinusoid's row ``offset + t``,
    as the full table's, the last row of a learned table at ``max_len - 1``."""
    sinusoid = posenc.PositionEmbedding("sinusoidal", D, max_len=16)
    table = sinusoid(torch.zeros(1, 16, D))
    assert torch.equal(sinusoid(X[:, :2], offset=0), table[:2])
    assert torch.equal(sinusoid(X[:, :1], offset=15), table[15:16])
    learned = posenc.PositionEmbedding("learned", D, max_len=16)
    assert torch.equal(learned(X[:, :1], offset=15), learned.weight[15:16].detach())
