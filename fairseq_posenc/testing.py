"""Checks a user can run on an attention-level encoding: the exactness every built-in
encoding is tested for, for an encoding of one's own (or a built-in with other options).

:func:`check_encoding` builds small stacks of :class:`~fairseq_posenc.nn.
PositionalSelfAttention` layers with the encoding, through the public API of
:mod:`fairseq_posenc.nn` (:class:`~fairseq_posenc.nn.PositionStack`,
:class:`~fairseq_posenc.nn.DecodingCache`), in float64 on the CPU, in evaluation mode,
and compares each way of running them with the full-sequence forward, the path used in
training:

* ``incremental decoding`` -- the causal stack decoded token by token through a cache,
  and a prefix fed at once then the rest, equals its full forward;
* ``beam reordering`` -- decoding with the cache reordered after every step, rows
  duplicated and permuted as beam search does, equals the full forward of the reordered
  sequences;
* ``padding`` -- in both stacks (encoder and decoder), a batch padded on the left and on
  the right equals each sequence run alone, at its real tokens.

A failure is an ``AssertionError`` that names the check, the encoding, its options, and
the largest difference against the tolerance. How the checks are built, and why the
tolerance is what it is: ``docs/architecture.md``, "Checking an encoding".
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch
from torch import Tensor, nn

from .nn import DecodingCache, PositionalSelfAttention, PositionStack, encoding_names

__all__ = ["check_encoding"]

#: The stacks' sizes: two layers (a shared table is read by both, a cache holds both).
EMBED_DIM, NUM_HEADS, NUM_LAYERS = 8, 2, 2
#: The longest sequence an absolute table covers (the default of ``*_max_len`` options).
MAX_LEN = 128
#: Positions decoded one by one: past the first window of content-free tables that a
#: decoding context computes (64 positions at the first step), so that a step reads a
#: window grown later too.
STEPS = 67
#: Beam search's sentences and hypotheses per sentence, and its steps.
SENTENCES, BEAM, BEAM_STEPS = 2, 3, 9
#: Real tokens of each row of the padded batches (the first one unpadded).
PADDED_LENGTHS = (9, 6, 3)
#: Largest difference allowed, relative to the largest value compared (at least 1):
#: float64 rounds at 1e-16, and the paths compared (a decoding step, the full forward,
#: SDPA's product and the explicit one) differ by tens of roundings; a wrong position,
#: order or padding changes outputs by far more than 1e-9 with the perturbed parameters.
TOLERANCE = 1e-9
#: Standard deviation of the noise added to every parameter of the encoding's modules, so
#: that tables that start at zero (or near it) make every position term count.
PERTURBATION = 0.5
SEED = 0


def check_encoding(name: str, **options: Any) -> None:
    """Run the checks ``incremental decoding``, ``beam reordering`` and ``padding`` (the
    module's docstring says what each compares) on the attention-level encoding ``name``
    (any of ``fairseq_posenc.nn.encoding_names(False)``, a registered one of the user's
    included) with ``options``, its options by Python name as
    :class:`~fairseq_posenc.nn.PositionStack` takes them (``shaw_clip=2``; ``pos_layers``
    too). Returns None when every check passes.

    The stacks are two layers of ``embed_dim`` 8, 2 heads, ``max_len`` 128, in float64
    and evaluation mode (an encoding that draws anything in training is checked without
    the draw). Every parameter of the encoding's modules gets Gaussian noise of standard
    deviation 0.5 added before the checks, so that a table that starts at zero does not
    make a check vacuous. Everything random is drawn from fixed seeds, without touching
    the caller's random state: the same result on every run.

    Raises ``AssertionError`` starting with the check's name (``"incremental decoding:
    ..."``) that gives the encoding, its options, where (a step, a row, a side of
    padding), the largest absolute difference and the tolerance. An input-level encoding,
    an unknown name, a wrong option or one of the sizes it chooses itself (``max_len``) is
    a ``ValueError`` or ``TypeError`` before any work."""
    if name in encoding_names(True):
        raise ValueError(
            f"check_encoding checks attention-level encodings, and {name!r} is an "
            f"input-level one (fairseq_posenc.nn.PositionEmbedding({name!r}, embed_dim)): "
            "embeddings added to the input, with no attention term, decoding cache or "
            "reordering to check. Attention-level encodings: "
            f"{', '.join(encoding_names(False))}")
    fixed = sorted({"num_layers", "embed_dim", "num_heads", "causal", "max_len"} & set(options))
    if fixed:
        raise TypeError(f"check_encoding chooses {', '.join(fixed)} itself (both stacks, "
                        f"sizes small enough to run in a fraction of a second), got "
                        f"{', '.join(f'{k}={options[k]!r}' for k in fixed)}: pass only the "
                        f"encoding's options (fairseq_posenc.nn.encoding_options({name!r})) "
                        "and pos_layers")
    label = (f"encoding {name!r} with "
             + (", ".join(f"{k}={v!r}" for k, v in options.items()) or "default options"))
    with _fixed_random_state():
        decoder = _Stack(name, options, causal=True)
        encoder = _Stack(name, options, causal=False)
    with torch.no_grad(), _one_thread():
        _check_incremental(decoder, label)
        _check_beam_reordering(decoder, label)
        for stack in (encoder, decoder):
            _check_padding(stack, label)


@contextlib.contextmanager
def _fixed_random_state() -> Iterator[None]:
    """The layers' initialisation drawn from :data:`SEED`; the caller's CPU random state
    restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        yield


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """One CPU thread for torch's operations, the caller's number restored afterwards: on
    tensors this small, threads only wait for each other, many times longer than the
    work where other processes hold the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _Stack:
    """A stack of :data:`NUM_LAYERS` residual self-attention layers with the encoding,
    float64, evaluation mode, the encoding's parameters perturbed."""

    def __init__(self, name: str, options: dict[str, Any], causal: bool) -> None:
        self.positions = PositionStack(name, num_layers=NUM_LAYERS, embed_dim=EMBED_DIM,
                                       num_heads=NUM_HEADS, causal=causal, max_len=MAX_LEN,
                                       **options)
        self.causal = causal
        self.layers = nn.ModuleList(
            PositionalSelfAttention(EMBED_DIM, NUM_HEADS, self.positions, layer=i,
                                    causal=causal)
            for i in range(NUM_LAYERS)).double().eval()
        noise = torch.Generator().manual_seed(SEED)
        with torch.no_grad():
            for param_name, param in self.layers.named_parameters():  # shared ones once
                if ".position_encoding." in param_name:
                    param.add_(PERTURBATION * torch.randn(param.shape, generator=noise,
                                                          dtype=param.dtype))

    def __call__(self, x: Tensor, padding_mask: Optional[Tensor] = None,
                 cache: Optional[DecodingCache] = None) -> Tensor:
        """One forward of the whole stack (a decoding step's with ``cache``)."""
        with self.positions.context(cache):
            for layer in self.layers:
                x = x + layer(x, padding_mask, cache)
        return x


def _inputs(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, EMBED_DIM, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(seed))


def _compare(check: str, label: str, got: Tensor, want: Tensor, where: str) -> None:
    """Raise the check's ``AssertionError`` unless ``got`` equals ``want`` within
    :data:`TOLERANCE` (relative to ``want``'s largest value, at least 1); a NaN fails."""
    tolerance = TOLERANCE * max(1.0, float(want.abs().max()))
    difference = float((got - want).abs().max())
    if not difference <= tolerance:
        raise AssertionError(f"{check}: {label}: {where}: max abs difference "
                             f"{difference:.3g}, more than the tolerance {tolerance:.3g}")


def _check_length(check: str, label: str, cache: DecodingCache, step: int) -> None:
    """After step ``step`` (from 0) the cache holds ``step + 1`` positions."""
    if len(cache) != step + 1:
        raise AssertionError(f"{check}: {label}: the cache holds {len(cache)} positions "
                             f"after step {step}, not {step + 1}")


def _check_incremental(stack: _Stack, label: str) -> None:
    """Token by token over :data:`STEPS` positions, then a prefix fed at once, one step
    and the rest at once, against one full forward of the whole sequences (causal: the
    first ``t + 1`` outputs are those of the prefix)."""
    check = "incremental decoding"
    x = _inputs(3, STEPS, seed=SEED + 1)
    full = stack(x)
    cache = DecodingCache()
    for t in range(STEPS):
        step = stack(x[:, t:t + 1], cache=cache)
        _compare(check, label, step[:, 0], full[:, t], f"step {t} against the full forward")
        _check_length(check, label, cache, t)
    cache = DecodingCache()
    parts = [stack(x[:, :5], cache=cache), stack(x[:, 5:6], cache=cache),
             stack(x[:, 6:], cache=cache)]
    _compare(check, label, torch.cat(parts, 1), full,
             "a prefix of 5 positions fed at once, then 1, then the rest, against the "
             "full forward")


def _check_beam_reordering(stack: _Stack, label: str) -> None:
    """:data:`BEAM` hypotheses per sentence; after every step each sentence keeps some of
    its hypotheses, some twice, in a new order (``DecodingCache.reorder``), and the next
    step's output is compared with the full forward of the reordered sequences."""
    check = "beam reordering"
    rows = SENTENCES * BEAM
    draw = torch.Generator().manual_seed(SEED + 2)
    prefix = _inputs(rows, 1, seed=SEED + 3)
    cache = DecodingCache()
    for t in range(BEAM_STEPS):
        step = stack(prefix[:, -1:], cache=cache)[:, 0]
        _compare(check, label, step, stack(prefix)[:, -1],
                 f"step {t}, after {t} reorderings, against the full forward of the "
                 "reordered sequences")
        _check_length(check, label, cache, t)
        order = torch.cat([s * BEAM + torch.randint(0, BEAM, (BEAM,), generator=draw)
                           for s in range(SENTENCES)])
        cache.reorder(order)
        following = torch.randn(rows, 1, EMBED_DIM, dtype=torch.float64, generator=draw)
        prefix = torch.cat([prefix[order], following], 1)


def _check_padding(stack: _Stack, label: str) -> None:
    """Rows of :data:`PADDED_LENGTHS` real tokens, padded on the left (fairseq's sources,
    and targets with ``--left-pad-target``) and on the right (its targets), against each
    row's real tokens run alone, at the real tokens. Padding holds other numbers than the
    real tokens, so that a term that reads it shows."""
    check = "padding"
    form = "causal (decoder)" if stack.causal else "non-causal (encoder)"
    length = max(PADDED_LENGTHS)
    alone = [_inputs(1, n, seed=SEED + 4 + row) for row, n in enumerate(PADDED_LENGTHS)]
    want = [stack(x) for x in alone]
    for side in ("left", "right"):
        batch = _inputs(len(alone), length, seed=SEED + 10)  # padding: other numbers
        mask = torch.ones(len(alone), length, dtype=torch.bool)
        for row, x in enumerate(alone):
            real = slice(length - x.size(1), length) if side == "left" else slice(0, x.size(1))
            batch[row, real], mask[row, real] = x[0], False
        got = stack(batch, mask)
        for row, x in enumerate(alone):
            real = ~mask[row]
            _compare(check, label, got[row, real], want[row][0],
                     f"the {form} stack, row {row} ({x.size(1)} real tokens of {length}, "
                     f"padded on the {side}) against the row alone")
