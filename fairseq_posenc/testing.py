"""Checks a user can run on an attention-level encoding: the exactness every built-in
encoding is tested for, for an encoding of one's own (or a built-in with other options).

:func:`check_encoding` builds small stacks of :class:`~fairseq_posenc.nn.
PositionalSelfAttention` layers with the encoding, through the public API of
:mod:`fairseq_posenc.nn` (:class:`~fairseq_posenc.nn.PositionStack`,
:class:`~fairseq_posenc.nn.DecodingCache`), in float64 on the CPU, in evaluation mode,
and compares each way of running them with the full-sequence forward, the path used in
training:

* ``incremental decoding`` -- the causal stack decoded through a cache, token by token
  where a decoding context's tables grow, and a prefix fed at once then the rest, equals
  its full forward;
* ``beam reordering`` -- decoding with the cache reordered after every step, rows
  duplicated and permuted as beam search does, equals the full forward of the reordered
  sequences;
* ``padding`` -- in both stacks (encoder and decoder; the decoder alone for an encoding
  defined for causal attention only), a batch padded on the left and on the right equals
  each sequence run alone, at its real tokens.

A failure is an ``AssertionError`` that names the check, the encoding, its options, and
the largest difference against the tolerance, or where the first value that is not finite
is. How the checks are built, and why the tolerance is what it is:
``docs/architecture.md``, "Checking an encoding".
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch
from torch import Tensor, nn

from .core.encodings import ENCODINGS
from .nn import (DecodingCache, PositionalSelfAttention, PositionStack, encoding_names,
                 encoding_options)

__all__ = ["check_encoding"]

#: The stacks' sizes: two layers (a shared table is read by both, a cache holds both).
EMBED_DIM, NUM_HEADS, NUM_LAYERS = 8, 2, 2
#: A decoding context computes each content-free table for a window of positions that grows
#: when a step needs more (:meth:`~fairseq_posenc.nn.PositionContext.ahead`): step 0 makes
#: it ``0 .. 64`` (distances ``-64 .. 64``), step 65 grows it to ``0 .. 194``, step 195 to
#: ``0 .. 454``. The last positions of the first two windows:
FIRST_WINDOW_END, SECOND_WINDOW_END = 64, 194
#: Positions of each sequence the incremental check decodes: past the second window.
LENGTH = SECOND_WINDOW_END + 6
#: The positions it decodes one per call: the first ones (step 0 makes the window), and
#: those on both sides of each growth (the last ones a window covers, then the steps that
#: grow it and read it grown, once and then twice). The positions between are fed in calls
#: of at most :data:`CHUNK`.
ONE_BY_ONE = (range(0, 8), range(FIRST_WINDOW_END - 3, FIRST_WINDOW_END + 5),
              range(SECOND_WINDOW_END - 3, LENGTH))
#: At most this many positions per call between the steps: a call of ``n`` positions asks
#: for distances up to ``n - 1`` after its first query, which the steps' window covers up
#: to ``n = 65``, so that no window grows but at a step.
CHUNK = FIRST_WINDOW_END
#: The longest sequence an absolute table covers (the default of ``*_max_len`` options):
#: :data:`LENGTH` and room.
MAX_LEN = 256
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

    The stacks are two layers of ``embed_dim`` 8, 2 heads, ``max_len`` 256, in float64
    and evaluation mode (an encoding that draws anything in training is checked without
    the draw). Every parameter of the encoding's modules gets Gaussian noise of standard
    deviation 0.5 added before the checks, so that a table that starts at zero does not
    make a check vacuous. Everything random is drawn from fixed seeds, without touching
    the caller's random state: the same result on every run.

    What it covers: ``incremental decoding`` decodes 3 sequences of 200 positions, one
    position per call at positions 0 .. 7, 61 .. 68 and 191 .. 199 (the first steps, and
    the steps on both sides of each growth of a decoding context's window of tables, at 65
    and 195), the positions between in calls of at most 64 (no window grows for them), and
    the same sequences' first 68 positions as a prefix of 5, 1 position, then the other 62
    at once;
    ``beam reordering`` decodes 2 sentences x 3 hypotheses for 9 steps; ``padding`` runs
    rows of 9, 6 and 3 real tokens padded to 9 on either side. An absolute table covers
    256 positions.

    Raises ``AssertionError`` starting with the check's name (``"incremental decoding:
    ..."``) that gives the encoding, its options, where (a step, a row, a side of
    padding), and either the largest absolute difference and the tolerance or, where an
    output is inf or nan, the first position that is. An input-level encoding, an unknown
    name, a wrong option, one of the sizes it chooses itself (``max_len``) or an absolute
    table shorter than the sequences it decodes is a ``ValueError`` or ``TypeError``
    before any work; an encoding's method that returns another shape or dtype than its
    kind documents is the attention's ``ValueError`` that names it."""
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
        stacks = [_Stack(name, options, causal=True)]
        if not ENCODINGS[name].causal_only():  # PaTH, stick-breaking: a decoder's only
            stacks.append(_Stack(name, options, causal=False))
    _check_length_bound(name, options)
    with torch.no_grad(), _one_thread():
        _check_incremental(stacks[0], label)
        _check_beam_reordering(stacks[0], label)
        for stack in reversed(stacks):  # the encoder's first, where there is one
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


def _check_length_bound(name: str, options: dict[str, Any]) -> None:
    """An absolute table of fewer than :data:`LENGTH` positions (``diet_abs_max_len=100``)
    cannot run the incremental check: a ``ValueError`` that says so, before any work."""
    cls = ENCODINGS[name]
    values = {**encoding_options(name), **options}
    bound = cls.max_length(values, MAX_LEN)
    if bound is not None and bound < LENGTH:
        raise ValueError(f"check_encoding decodes sequences of {LENGTH} positions, and "
                         f"{cls.max_len_option}={bound} gives {name!r} a table of {bound}: "
                         f"pass {cls.max_len_option}={LENGTH} or more, or leave it at its "
                         f"default ({MAX_LEN} here)")


def _compare(check: str, label: str, got: Tensor, want: Tensor, where: str,
             names: tuple[str, str], axes: tuple[str, ...], origin: tuple[int, ...] = ()
             ) -> None:
    """Raise the check's ``AssertionError`` unless ``got`` equals ``want`` within
    :data:`TOLERANCE` (relative to ``want``'s largest value, at least 1). Where either holds
    a value that is not finite, the message says which (``names``: what ``got`` and
    ``want`` are) and where its first one is, by the ``axes`` (the names of the tensors'
    dimensions before the last, the channels), counted from ``origin`` (0 by default)."""
    for name, value in zip(names, (got, want)):
        bad = ~torch.isfinite(value)
        if bool(bad.any()):
            first = bad.nonzero()[0].tolist()
            at = ", ".join(f"{axis} {index + start}" for axis, index, start in
                           zip(axes, first, tuple(origin) + (0,) * len(axes)))
            raise AssertionError(
                f"{check}: {label}: {where}: non-finite values (inf/nan) in {name}, the "
                f"first at {at}: a position term is inf or nan where the attention expects "
                "finite numbers (an inf bias where a mask adds -inf is nan): keep every term "
                "finite, a large negative bias where a pair must not attend")
    tolerance = TOLERANCE * max(1.0, float(want.abs().max()))
    difference = float((got - want).abs().max())
    if not difference <= tolerance:
        raise AssertionError(f"{check}: {label}: {where}: max abs difference "
                             f"{difference:.3g}, more than the tolerance {tolerance:.3g}")


def _check_length(check: str, label: str, cache: DecodingCache, held: int,
                  after: str) -> None:
    """The cache holds ``held`` positions ``after`` a call (``"step 3"``)."""
    if len(cache) != held:
        raise AssertionError(f"{check}: {label}: the cache holds {len(cache)} positions "
                             f"after {after}, not {held}")


def _decoding_calls() -> list[tuple[int, int]]:
    """The incremental check's calls, ``(start, stop)``: positions ``start .. stop - 1``
    each; one position each in :data:`ONE_BY_ONE`, :data:`CHUNK` at most between."""
    calls: list[tuple[int, int]] = []
    for run in ONE_BY_ONE:
        done = calls[-1][1] if calls else 0
        calls += [(start, min(start + CHUNK, run.start))
                  for start in range(done, run.start, CHUNK)]
        calls += [(t, t + 1) for t in run]
    return calls


def _check_incremental(stack: _Stack, label: str) -> None:
    """:data:`LENGTH` positions through a cache, :func:`_decoding_calls`, then the first
    ``FIRST_WINDOW_END + 4`` (past the first growth) as a prefix of 5 fed at once, one step
    and the rest at once, against one full forward of the whole sequences (causal: the
    first ``t + 1`` outputs are those of the prefix)."""
    check = "incremental decoding"
    names, axes = ("the decoded outputs", "the full forward"), ("row", "position")
    x = _inputs(3, LENGTH, seed=SEED + 1)
    full = stack(x)
    cache = DecodingCache()
    for start, stop in _decoding_calls():
        after = (f"step {start}" if stop == start + 1
                 else f"positions {start}..{stop - 1} fed at once")
        _compare(check, label, stack(x[:, start:stop], cache=cache), full[:, start:stop],
                 f"{after} against the full forward", names, axes, (0, start))
        _check_length(check, label, cache, stop, after)
    cache, end = DecodingCache(), FIRST_WINDOW_END + 4
    parts = [stack(x[:, :5], cache=cache), stack(x[:, 5:6], cache=cache),
             stack(x[:, 6:end], cache=cache)]
    _compare(check, label, torch.cat(parts, 1), full[:, :end],
             f"a prefix of 5 positions fed at once, then 1, then the rest of {end}, against "
             "the full forward", names, axes)


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
                 "reordered sequences", ("the step's outputs", "the full forward"), ("row",))
        _check_length(check, label, cache, t + 1, f"step {t}")
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
                     f"padded on the {side}) against the row alone",
                     ("the padded batch's outputs", "the row alone"), ("real token",))
