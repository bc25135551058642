"""SHAPE (Kiyono et al. 2021): in training every sequence's positions shifted by one offset
``k ~ U{0..K}``, drawn per sequence; none in evaluation, where ``shape`` is ``sinusoidal``.

The embeddings a training forward adds are compared with a float64 loop of fairseq's
sinusoid (``support/naive.py``) at ``padding_idx + 1 + t + k``; the offset of each row is
found by searching ``0..K``, so the test does not restate the draw.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from fairseq_posenc.core.encodings.shape import ShiftedPositions
from tests.support.batches import random_source
from tests.support.model_utils import build_model
from tests.support.naive import naive_sinusoid

K = 9


def left_padded_mask(batch: int, length: int) -> torch.Tensor:
    """Row ``b`` has ``b`` padding tokens on the left (as fairseq's sources)."""
    return torch.arange(length)[None, :] < torch.arange(batch)[:, None]


def test_one_offset_per_sequence_uniform_in_0_to_k():
    padding = left_padded_mask(4, 6)
    draw = ShiftedPositions(K)
    offsets = Counter()
    for seed in range(2000):
        positions = draw(padding, torch.Generator().manual_seed(seed))
        for b in range(4):
            real = positions[b][~padding[b]]
            k = int(real[0])
            # one offset for the whole sequence, counted from its first real token
            assert real.tolist() == list(range(k, k + len(real)))
            assert positions[b][padding[b]].eq(0).all()
            offsets[k] += 1
    assert set(offsets) == set(range(K + 1))  # 0 and K included
    expected = 8000 / (K + 1)
    assert all(abs(n - expected) < 0.15 * expected for n in offsets.values()), offsets


def test_offsets_differ_between_sequences_and_repeat_with_the_seed():
    padding = torch.zeros(64, 5, dtype=torch.bool)
    draw = ShiftedPositions(500)
    first = draw(padding, torch.Generator().manual_seed(3))
    assert len(set(first[:, 0].tolist())) > 40  # per sequence, not per batch
    assert torch.equal(first, draw(padding, torch.Generator().manual_seed(3)))
    torch.manual_seed(5)
    a = draw(padding)
    torch.manual_seed(5)
    assert torch.equal(a, draw(padding))  # the global generator, as fairseq's dropout


def added_embeddings(model, run):
    """What each stack's input embedding added during ``run()``: ``{stack: (B, T, d)}``."""
    seen = {}
    hooks = [stack.embed_positions.register_forward_hook(
        lambda module, args, out, name=name: seen.__setitem__(name, out))
        for name, stack in (("encoder", model.encoder), ("decoder", model.decoder))]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def offset_of(added: torch.Tensor, tokens: torch.Tensor, pad: int) -> int:
    """The one k in 0..K for which the row's embeddings are fairseq's sinusoids at
    ``pad + 1 + t + k`` for its t-th real token (a float64 loop), else a failure."""
    real = added[tokens.ne(pad)].double()
    dim = added.size(-1)
    found = [k for k in range(K + 1) if all(
        (real[t] - torch.tensor(naive_sinusoid(pad + 1 + t + k, dim))).abs().max() < 1e-4
        for t in range(real.size(0)))]
    assert len(found) == 1, found
    return found[0]


def test_training_adds_sinusoids_at_shifted_positions_one_offset_per_sequence():
    model, d = build_model("shape", ["--shape-max-shift", str(K)])
    src, lengths = random_source(d, bsz=6)
    prev = torch.randint(d.nspecial, 40, (6, 5))
    prev[:, 0] = d.eos()
    prev[0, -2:] = d.pad()  # right padding, as fairseq's targets
    model.train()  # dropout is 0
    torch.manual_seed(11)
    added = added_embeddings(model, lambda: model(src, lengths, prev))
    offsets = {stack: [offset_of(added[stack][b], tokens[b], d.pad()) for b in range(6)]
               for stack, tokens in (("encoder", src), ("decoder", prev))}
    # drawn per sequence, and independently in the encoder and the decoder
    assert len(set(offsets["encoder"])) > 1 and len(set(offsets["decoder"])) > 1
    assert offsets["encoder"] != offsets["decoder"]
    # padding rows of the input get fairseq's padding row (zeros)
    assert added["encoder"][src.eq(d.pad())].abs().max() == 0


def test_left_padding_keeps_a_sequence_positions_in_training():
    """The same shift for a padded row and the row alone gives the same embeddings."""
    model, d = build_model("shape", ["--shape-max-shift", str(K)])
    model.train()
    src, lengths = random_source(d)
    for row in range(src.size(0)):
        alone = src[row][src[row].ne(d.pad())].unsqueeze(0)
        embedded = {}
        for name, tokens in (("padded", src[row : row + 1]), ("alone", alone)):
            torch.manual_seed(row)  # one row: the same draw
            embedded[name] = added_embeddings(
                model, lambda: model.encoder(tokens, lengths[row : row + 1]))["encoder"]
        padded = embedded["padded"][0][src[row].ne(d.pad())]
        assert torch.equal(padded, embedded["alone"][0])


def test_evaluation_is_sinusoidal():
    """No shift outside training: the same numbers as ``sinusoidal`` (the same
    parameters: SHAPE adds none)."""
    shape, d = build_model("shape")
    plain, _ = build_model("sinusoidal")
    src, lengths = random_source(d)
    prev = torch.full((3, 4), d.eos())
    with torch.no_grad():
        assert torch.equal(shape(src, lengths, prev)[0], plain(src, lengths, prev)[0])


def test_training_forward_differs_from_evaluation():
    model, d = build_model("shape")
    src, lengths = random_source(d)
    with torch.no_grad():
        evaluated = model.encoder(src, lengths)["encoder_out"][0]
        model.train()
        trained = model.encoder(src, lengths)["encoder_out"][0]
    assert (evaluated - trained).abs().max() > 1e-3


@pytest.mark.parametrize("flags,message", [
    (["--shape-max-shift", "0"], "--shape-max-shift must be a positive integer, got 0. SHAPE "
                                 "uses K = 500 for WMT; K = 0 is --pos-encoding sinusoidal."),
    (["--random-positions", "64"], "--random-positions cannot apply to --pos-encoding shape: "
                                   "SHAPE shifts the positions 0..n-1 itself"),
    (["--encoder-learned-pos"], "--pos-encoding shape conflicts with"),
])
def test_bad_flags_say_what_to_do(flags, message):
    with pytest.raises(ValueError) as error:
        build_model("shape", flags)
    assert str(error.value).startswith(message)
