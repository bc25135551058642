#!/usr/bin/env python
"""Speed and memory of every position encoding against stock fairseq ``transformer``.

    python scripts/benchmark.py                       # the full run (CPU here: see below)
    python scripts/benchmark.py --quick               # CI smoke run, a few seconds
    python scripts/benchmark.py --encodings t5 shaw --sizes small --lengths 30 --reps 3
    python scripts/benchmark.py --level layer rest    # the parts only, ~25 min
    python scripts/benchmark.py --render runs/benchmark.json   # a run's report again
    python scripts/benchmark.py --encoding-adam       # Adam over each encoding's parameters

For every size x source length, all models are built in one process: stock fairseq
(its own args-based ``TransformerModel``, ``--arch transformer`` / ``transformer_wmt_en_de``,
sinusoidal positions) and ``transformer_posenc --pos-encoding NAME`` for each encoding, all
through the same ``TranslationTask`` and shared dictionary, and timed on three calls:

* ``train``: one training step on a fixed batch -- forward, label-smoothed cross-entropy
  (0.1), backward, ``Adam.step`` -- with dropout 0.1 (``model.train()``). Every timed step
  gets a fresh Adam whose state is allocated first by an untimed step on zero gradients
  (21 models' Adam states would not fit in memory at once);
* ``forward``: ``model.eval()``, ``no_grad``, teacher-forced encoder + decoder on the batch;
* ``translate``: encoder + incremental beam search (``SequenceGenerator``, beam 10) over a
  fixed set of sources, with ``min_len = max_len = source length`` so every model decodes
  the same number of steps whatever its (random) weights prefer.

Every model is first called once untimed (a warm-up round, which is also the memory round:
see below). Then, in each repetition and for each kind of call, all models are timed in a
row: stock first, then the encodings in an order shuffled per repetition, with stock timed
again after every ``--stock-every`` (3) encodings. Each encoding's time is divided by the
mean of the two stock calls around it, taken seconds apart, so that the machine's drifts
in speed cancel (on the 2-core build VM the same call's time drifts by up to 2x over tens
of seconds, and a bare 250 ms matrix-product loop varies by +-10% from one run to the next).
Reported: the median of these ratios over repetitions (default 5), their min-max, the
absolute stock times, and how much the identical stock calls varied. A second stock model
(``stock_copy``, the noise control) is timed exactly like an encoding: its ratios, whose
true value is 1, show how far noise alone moves a ratio in the same run. A verdict is
conclusive when every repetition falls on the same side of the limit (for 5 repetitions,
the min-max range is a 94% confidence interval of the median).
Python's garbage collector is off inside the timed calls (the models' objects are frozen
out of its generations; collections run between the calls).

The parts (``--level layer rest``; all levels by default). Whole-model ratios on a noisy
machine cannot resolve a few percent, so the parts in which a model can differ from stock
are timed by themselves, with many more repetitions:

* ``layer``: the first encoder self-attention layer of each model and its first decoder
  self-attention layer -- in training, forward + backward on the same padded batch
  (dropout on) and an Adam step over the layers' parameters and their encoding's (state
  allocated untimed); in translation, the encoder layer's forward and the decoder layer's
  ``length + 1`` incremental steps over ``sentences x beam`` rows, as beam search runs
  it -- against stock fairseq's ``MultiheadAttention``, each between two stock calls,
  ``--layer-reps`` (30) times: calls of milliseconds, resolved to about a percent. The
  same for the first two layers of each stack in a row: the first layer also computes
  the terms a stack shares (TUPE's ``p U_Q``, ``p U_K`` and their product; a bias
  table), layers 2..L only read them, so the second layer's extra time is what each
  later layer adds. Input encodings keep stock layers and are skipped.
* ``rest``: the same models built with 0 layers per stack (embeddings, fairseq's input
  positions where kept, the stacks' own code, output projection, loss, Adam, beam search),
  ``--rest-reps`` (20) times, every model including the input encodings.

A model is its layers and the rest, and its layers differ from stock's only in
self-attention, so its ratio is ``1 + ((r_0 - 1) S_0 + (r_1 - 1) S_1 + (L - 1)(r_2 - 1)
S_2) / t_model`` (the rest's, the first and the later self-attention layers' ratios
``r``, stock's times ``S`` of those parts, ``t_model`` of the whole model): the report's
*from parts* ratio, which decides a target where the direct model ratio cannot.

Memory, per call kind, measured once per model outside the timed calls: the peak of live
bytes allocated during the call (CUDA: ``torch.cuda.max_memory_allocated`` after a reset,
minus what was allocated before; CPU: a ``TorchDispatchMode`` that follows every tensor
storage created by an operator until it is freed) as a ratio to stock, and the largest
single *activation* tensor (tensors shaped like a model parameter -- gradients, Adam's
moments -- are left out) relative to ``B * H * len * len * d_h`` for ``B`` sentences of
``len`` tokens: ``>= 1`` means a ``len x len x d_h`` tensor per head and sentence, which
only ``huang3`` (Huang et al.'s method 3) should build. Fused kernels' internal buffers
(e.g. inside ``scaled_dot_product_attention``) are not visible to the dispatch tracker.

Batches: random tokens from a shared vocabulary (``--vocab``, default 10000, joined
dictionary, ``--share-all-embeddings``); source lengths drawn in ``[0.8 len, len]`` (at
least one of exactly ``len``), left-padded as fairseq does, targets likewise right-padded:
padding is part of every real batch, so padding-dependent code paths are exercised.

Targets (ratio to stock, median over repetitions, train and translate): ``sinusoidal``,
``learned``, ``none`` <= 1.03; ``t5``, ``t5_nob``, ``diet_rel``, ``diet_abs``, ``alibi``,
``at5`` <= 1.05; ``shaw`` <= 1.10 train / 1.15 translate; ``tupe_a``, ``tupe_r`` <= 1.05 /
1.10; ``rope`` <= 1.05. Memory: no encoding but ``huang3`` builds a ``len x len x d_h``
tensor. Other encodings get ratios and no verdict.

Default run (``DEFAULTS`` below) on the 2-core build VM, no GPU, 2 threads: 59.6 min wall
(2026-11-22; small/30 5 min, small/120 11 min, base/30 7 min, base/120 14 min, the layer
level 12 min, the rest level 11 min), peak RSS about 7 GB (22 base models). ``--level
layer`` alone: about 12 min. The latest table is in README.md and ``docs/benchmark-cpu.md``.

The optimizer step over an encoding's own parameters is in the layer level's training
call (a term a stack shares counts with its first layer). ``--encoding-adam`` times that
step alone: on this CPU, Adam over the 2.1M parameters of ``tupe_a`` or ``tupe_r`` took
8.3-8.5 ms and over ``diet_abs``'s 11.3 ms (stock's whole step: 274 ms), 1.2-2.5% of a
training step here; over ``shaw``'s or ``diet_rel``'s, 1.1-1.5 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import fairseq_posenc  # noqa: E402,F401  (registers the model)
from fairseq import options  # noqa: E402
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.sequence_generator import SequenceGenerator  # noqa: E402
from fairseq.tasks.translation import TranslationTask  # noqa: E402
from fairseq_posenc.attention import PositionalMultiheadAttention  # noqa: E402
from fairseq_posenc.context import PositionContext  # noqa: E402
from fairseq_posenc.encodings import ENCODINGS  # noqa: E402

STOCK = "stock"
#: A second, identical stock model timed like an encoding: its ratios (true value 1) show
#: how far the machine's noise alone moves a ratio in this run.
CONTROL = "stock_copy"

#: name -> (stock arch, flags for both models); ``transformer_posenc`` is
#: ``transformer_wmt_en_de``-sized, so flags only change what differs from it.
SIZES: dict[str, dict[str, Any]] = {
    # BERT-small-like: 4+4 layers, 512 wide, 8 heads, FFN 2048
    "small": {"stock_arch": "transformer", "layers": 4, "dim": 512, "heads": 8, "ffn": 2048},
    # fairseq's transformer_wmt_en_de, the papers' base model: 6+6 layers
    "base": {"stock_arch": "transformer_wmt_en_de", "layers": 6, "dim": 512, "heads": 8,
             "ffn": 2048},
    # --quick only; few positions, so that tables over max positions stay small
    "tiny": {"stock_arch": "transformer", "layers": 2, "dim": 32, "heads": 4, "ffn": 64,
             "positions": 64},
}

#: (train, translate) limits on the ratio to stock; encodings not listed have no target.
TARGETS: dict[str, tuple[float, float]] = {
    **{name: (1.03, 1.03) for name in ("sinusoidal", "learned", "none")},
    **{name: (1.05, 1.05) for name in ("t5", "t5_nob", "diet_rel", "diet_abs", "alibi", "at5")},
    "shaw": (1.10, 1.15),
    "tupe_a": (1.05, 1.10),
    "tupe_r": (1.05, 1.10),
    "rope": (1.05, 1.05),
}
#: The only encoding allowed (and expected) to build a len x len x d_h tensor.
QUADRATIC_DH = {"huang3"}

KINDS = ("train", "forward", "translate")
#: What is timed: whole models (``model``), their first self-attention layers (``layer``),
#: and everything but their layers (``rest``: the same models with 0 layers).
LEVELS = ("model", "layer", "rest")
#: The calls timed at the rest level (forward is a part of train).
REST_KINDS = ("train", "translate")

#: Defaults of the full run (its time on the build VM: see the module docstring).
DEFAULTS = {
    "sizes": ["small", "base"],
    "lengths": [30, 120],
    "reps": 5,
    # repetitions of the layer-level timings (milliseconds each)
    "layer_reps": 30,
    # repetitions of the rest-level timings (0-layer models, 0.05-0.5 s each)
    "rest_reps": 20,
    # stock is timed before the first encoding and after every this many
    "stock_every": 3,
    # sentences per training / forward batch, per length (CPU; CUDA: CUDA_DEFAULTS)
    "batch": {30: 8, 120: 2},
    # sentences translated with beam 10, per length (CPU; CUDA: CUDA_DEFAULTS)
    "translate": {30: 2, 120: 1},
    "vocab": 10000,
    "beam": 10,
}
#: On a GPU, the configuration people train in (issue 12): the base model, half precision,
#: batches of 32k source tokens, 64 sentences translated, 128 and 512 tokens.
CUDA_DEFAULTS = {
    "sizes": ["base"],
    "lengths": [128, 512],
    "dtypes": ["float16", "bfloat16"],
    "batch_tokens": 32768,
    "translate_sentences": 64,
}
#: ``--dtype`` names.
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
QUICK = {
    "sizes": ["tiny"],
    "lengths": [12],
    "reps": 2,
    "layer_reps": 2,
    "rest_reps": 2,
    "stock_every": 3,
    "batch": {12: 2},
    "translate": {12: 2},
    "vocab": 64,
    "beam": 4,
    "encodings": ["sinusoidal", "diet_rel", "huang3"],
}


# --- models and data ------------------------------------------------------------------


def shared_dictionary(vocab: int) -> Dictionary:
    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    return d


def model_flags(size: str, layers: Optional[int] = None) -> list[str]:
    spec = SIZES[size]
    layers = spec["layers"] if layers is None else layers
    return [
        "--encoder-layers", str(layers), "--decoder-layers", str(layers),
        "--encoder-embed-dim", str(spec["dim"]), "--decoder-embed-dim", str(spec["dim"]),
        "--encoder-ffn-embed-dim", str(spec["ffn"]), "--decoder-ffn-embed-dim", str(spec["ffn"]),
        "--encoder-attention-heads", str(spec["heads"]),
        "--decoder-attention-heads", str(spec["heads"]),
        "--dropout", "0.1", "--share-all-embeddings",
        *([] if "positions" not in spec else
          ["--max-source-positions", str(spec["positions"]),
           "--max-target-positions", str(spec["positions"])]),
    ]


def build_model(name: str, size: str, dictionary: Dictionary, seed: int,
                device: torch.device, layers: Optional[int] = None,
                dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """Stock fairseq (``name == STOCK``) or ``transformer_posenc --pos-encoding name``;
    ``layers``: per stack, instead of the size's; ``dtype``: the parameters' (half
    precision as ``fairseq-train --fp16`` / ``--bf16`` casts the model)."""
    if name in (STOCK, CONTROL):
        arch = ["--arch", SIZES[size]["stock_arch"]]
    else:
        arch = ["--arch", "transformer_posenc", "--pos-encoding", name]
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["/nonexistent", "--task", "translation", *arch, *model_flags(size, layers)],
    )
    torch.manual_seed(seed)
    model = TranslationTask(args, dictionary, dictionary).build_model(args)
    return model.to(device=device, dtype=dtype)


@dataclass
class Batch:
    src_tokens: torch.Tensor
    src_lengths: torch.Tensor
    prev_output_tokens: torch.Tensor
    target: torch.Tensor

    @property
    def sentences(self) -> int:
        return self.src_tokens.size(0)


def random_lengths(n: int, length: int, gen: torch.Generator) -> list[int]:
    """``n`` lengths in ``[0.8 length, length]`` (eos included), the first exactly ``length``."""
    lo = max(2, math.ceil(0.8 * length))
    rest = torch.randint(lo, length + 1, (n - 1,), generator=gen).tolist() if n > 1 else []
    return [length, *rest]


def make_batch(d: Dictionary, n: int, length: int, seed: int,
               device: torch.device) -> Batch:
    """``n`` random sentence pairs: sources left-padded, targets right-padded (fairseq's
    defaults), both ending in eos; ``prev_output_tokens`` is eos + target[:-1]."""
    gen = torch.Generator().manual_seed(seed)
    pad, eos = d.pad(), d.eos()

    def sentences() -> list[torch.Tensor]:
        out = []
        for n_tok in random_lengths(n, length, gen):
            words = torch.randint(d.nspecial, len(d), (n_tok - 1,), generator=gen)
            out.append(torch.cat([words, torch.tensor([eos])]))
        return out

    src, tgt = sentences(), sentences()
    src_tokens = torch.full((n, length), pad, dtype=torch.long)
    target = torch.full((n, length), pad, dtype=torch.long)
    prev = torch.full((n, length), pad, dtype=torch.long)
    for i, (s, t) in enumerate(zip(src, tgt)):
        src_tokens[i, length - len(s):] = s
        target[i, : len(t)] = t
        prev[i, 0] = eos
        prev[i, 1: len(t)] = t[:-1]
    lengths = torch.tensor([len(s) for s in src])
    return Batch(src_tokens.to(device), lengths.to(device), prev.to(device), target.to(device))


# --- the measured calls ---------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class MasterWeightAdam:
    """Adam as ``fairseq-train --fp16`` / ``--bf16`` runs it (``FP16Optimizer``): on float32
    master copies of the half-precision parameters, gradients copied up, new weights copied
    back. Dynamic loss scaling, one multiply of the loss and of the gradients, is left out."""

    def __init__(self, params: Sequence[torch.nn.Parameter], lr: float) -> None:
        self.params = list(params)
        self.master = [p.detach().float().requires_grad_() for p in self.params]
        self.adam = torch.optim.Adam(self.master, lr=lr, betas=(0.9, 0.98), eps=1e-8)
        self.param_groups = [{"params": self.params}]

    def step(self) -> None:
        for p, m in zip(self.params, self.master):
            m.grad = None if p.grad is None else p.grad.float()
        self.adam.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        self.adam.zero_grad(set_to_none=True)


def make_optimizer(params: Iterable[torch.nn.Parameter], lr: float = 1e-5):
    """fairseq's Adam: plain for float32 parameters, on float32 master weights for half."""
    params = list(params)
    if any(p.dtype != torch.float32 for p in params):
        return MasterWeightAdam(params, lr)
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-8)


def init_optimizer_state(optimizer) -> None:
    """Allocate Adam's state with a step on zero gradients (parameters stay unchanged):
    the first real step then runs as in steady-state training, at a fraction of the cost
    of an untimed warm-up training step."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def train_step(model, optimizer, batch: Batch, pad: int) -> None:
    model.train()
    optimizer.zero_grad(set_to_none=True)
    net_output = model(batch.src_tokens, batch.src_lengths, batch.prev_output_tokens)
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    loss, _ = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), batch.target.view(-1),
                                      0.1, ignore_index=pad, reduce=True)
    loss.backward()
    optimizer.step()


def full_forward(model, batch: Batch) -> None:
    model.eval()
    with torch.no_grad():
        model(batch.src_tokens, batch.src_lengths, batch.prev_output_tokens)


def make_generator(model, d: Dictionary, beam: int, length: int) -> SequenceGenerator:
    # min_len = max_len = length: eos is forbidden before step `length` and forced at it,
    # so every model, whatever its random weights, decodes `length + 1` steps.
    return SequenceGenerator([model], d, beam_size=beam, max_len_a=0, max_len_b=length,
                             min_len=length, len_penalty=0.6)


def translate(model, generator: SequenceGenerator, sources: Batch) -> list:
    model.eval()
    sample = {"net_input": {"src_tokens": sources.src_tokens,
                            "src_lengths": sources.src_lengths}}
    with torch.no_grad():
        return generator.generate([model], sample)


# --- memory ---------------------------------------------------------------------------


class LiveTensorTracker(TorchDispatchMode):
    """Peak of live bytes of the tensor storages created while active, and the largest one.

    Every operator output whose storage is new (not an input's storage: views and in-place
    results alias their inputs) is counted until its storage is freed (a weak reference to
    the storage, whose callback runs when it is freed). Tensors that existed before (parameters, inputs, caches) are never
    counted. ``ignore_shapes``: shapes left out of the largest-tensor search (parameter
    shapes: gradients and optimizer states), though still counted in the peak.
    """

    def __init__(self, ignore_shapes: Iterable[tuple[int, ...]] = ()) -> None:
        super().__init__()
        self.ignore_shapes = set(ignore_shapes)
        self.live = 0
        self.peak = 0
        self.largest_numel = 0
        self.largest_shape: tuple[int, ...] = ()
        self.largest_op = ""
        self._refs: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors(args)}
        if kwargs:
            inputs.update(t.untyped_storage().data_ptr() for t in _tensors(kwargs.values()))
        for t in _tensors((out,)):
            self._track(t, inputs, func)
        return out

    def _track(self, t: torch.Tensor, inputs: set[int], func) -> None:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in inputs or ptr in self._refs:
            return
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        # the callback runs when the storage is freed
        self._refs[ptr] = weakref.ref(storage, lambda _, ptr=ptr, n=nbytes: self._free(ptr, n))
        self.live += nbytes
        if self.live > self.peak:
            self.peak = self.live
        numel = t.numel()
        if numel > self.largest_numel and tuple(t.shape) not in self.ignore_shapes:
            self.largest_numel = numel
            self.largest_shape = tuple(t.shape)
            self.largest_op = str(getattr(func, "__name__", func))

    def _free(self, ptr: int, nbytes: int) -> None:
        self._refs.pop(ptr, None)
        self.live -= nbytes


def _tensors(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    """The tensors among ``values`` and in their lists and tuples (operator arguments
    and results nest one level at most)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            for w in v:
                if isinstance(w, torch.Tensor):
                    yield w


def measure_memory(call: Callable[[], Any], device: torch.device,
                   ignore_shapes: Iterable[tuple[int, ...]]) -> dict[str, Any]:
    """Peak bytes allocated during ``call()`` and its largest activation tensor."""
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    tracker = LiveTensorTracker(ignore_shapes)
    start = time.perf_counter()
    with tracker:
        result = call()
        sync(device)
    seconds = time.perf_counter() - start
    del result
    peak = tracker.peak
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
    return {"peak_bytes": int(peak), "tracked_peak_bytes": int(tracker.peak),
            "largest_numel": int(tracker.largest_numel),
            "largest_shape": list(tracker.largest_shape), "largest_op": tracker.largest_op,
            "tracked_call_seconds": seconds}


# --- one configuration ----------------------------------------------------------------


@dataclass
class Config:
    size: str
    length: int
    batch: int
    translate: int
    reps: int
    stock_every: int
    beam: int
    vocab: int
    seed: int
    layer_reps: int = 30
    rest_reps: int = 20
    dtype: str = "float32"

    @property
    def key(self) -> str:
        return f"{self.size}/len{self.length}" + ("" if self.dtype == "float32" else f"/{self.dtype}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


@dataclass
class ModelUnderTest:
    name: str
    model: torch.nn.Module
    generator: SequenceGenerator
    param_shapes: set = field(default_factory=set)


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def median_seconds(calls: Sequence[Sequence[float]]) -> float:
    """Median of every timed call, over repetitions (a repetition may hold several)."""
    return median([t for rep in calls for t in rep])


def ratio_spread(per_rep: Sequence[float]) -> dict[str, Any]:
    """A ratio over repetitions: median, min-max, interquartile range (linear
    interpolation) and the raw per-repetition ratios."""
    q1, _, q3 = (statistics.quantiles(per_rep, n=4, method="inclusive") if len(per_rep) > 1
                 else [per_rep[0]] * 3)
    return {"ratio": median(per_rep), "min": min(per_rep), "max": max(per_rep), "q1": q1,
            "q3": q3, "per_rep_ratios": list(per_rep)}


def ratio_cell(per_rep: Sequence[float], calls: Sequence[Sequence[float]]) -> dict[str, Any]:
    """:func:`ratio_spread`, and the median time of the calls."""
    return {**ratio_spread(per_rep), "seconds": median_seconds(calls)}


def timed(call: Callable[[], Any], device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - start


def interleave(
    timed_names: Sequence[str], kinds: Sequence[str], call: Callable[[str, str], float],
    reps: int, stock_every: int, seed: int, progress: Callable[[int, float], None],
) -> tuple[dict[str, dict[str, list[list[float]]]], dict[str, dict[str, list[float]]]]:
    """Time ``call(name, kind)`` for stock and every timed name, ``reps`` times.

    Each kind of call is timed for all names in a row, stock before the first and again
    after every ``stock_every`` of them: each time is divided by the mean of the two stock
    calls that bracket it, so that the machine's drifts in speed cancel. The order is
    shuffled for every repetition (no name always follows the same one). Returns the raw
    times (stock: every call of a repetition) and the ratios, per name and kind."""
    times: dict[str, dict[str, list[list[float]]]] = {
        name: {kind: [] for kind in kinds} for name in [STOCK, *timed_names]}
    ratios: dict[str, dict[str, list[float]]] = {
        name: {kind: [] for kind in kinds} for name in timed_names}
    gc.collect()
    gc.freeze()  # the models' objects: later collections skip them
    try:
        for rep in range(reps):
            t0 = time.perf_counter()
            order = list(timed_names)
            random.Random(f"{seed}/{rep}").shuffle(order)
            for kind in kinds:
                gc.collect()
                gc.disable()  # no collection pauses inside timed calls
                try:
                    before = call(STOCK, kind)
                    stock_calls = [before]
                    for i in range(0, len(order), stock_every):
                        block = [(name, call(name, kind)) for name in order[i: i + stock_every]]
                        after = call(STOCK, kind)
                        stock_calls.append(after)
                        for name, seconds in block:
                            times[name][kind].append([seconds])
                            ratios[name][kind].append(seconds / ((before + after) / 2))
                        before = after
                    times[STOCK][kind].append(stock_calls)
                finally:
                    gc.enable()
            progress(rep, time.perf_counter() - t0)
    finally:
        gc.unfreeze()
    return times, ratios


def warm_up_and_interleave(
    timed_names: Sequence[str], kinds: Sequence[str], call: Callable[[str, str], float],
    reps: int, stock_every: int, seed: int, log: Callable[[str], None], label: str,
):
    """One untimed call of every name and kind, then :func:`interleave`, logging the
    repetitions at half-way and at the end (the parts' calls are many and short)."""
    for name in [STOCK, *timed_names]:
        for kind in kinds:
            call(name, kind)
    return interleave(
        timed_names, kinds, call, reps, stock_every, seed,
        lambda rep, seconds: rep + 1 in (reps // 2, reps) and log(
            f"[{label}] repetition {rep + 1}/{reps} {seconds:.1f}s"))


def model_call(m: ModelUnderTest, kind: str, batch: Batch, sources: Batch, pad: int,
               seed: int, device: torch.device) -> float:
    """Seconds of one ``train`` step (a fresh Adam, its state allocated untimed),
    ``forward`` or ``translate`` call."""
    if kind == "train":
        torch.manual_seed(seed)
        optimizer = make_optimizer(m.model.parameters())
        init_optimizer_state(optimizer)
        seconds = timed(lambda: train_step(m.model, optimizer, batch, pad), device)
        del optimizer
        m.model.zero_grad(set_to_none=True)
        return seconds
    if kind == "forward":
        return timed(lambda: full_forward(m.model, batch), device)
    return timed(lambda: translate(m.model, m.generator, sources), device)


def run_config(cfg: Config, encodings: Sequence[str], device: torch.device,
               log: Callable[[str], None]) -> dict[str, Any]:
    d = shared_dictionary(cfg.vocab)
    pad = d.pad()
    batch = make_batch(d, cfg.batch, cfg.length, cfg.seed, device)
    sources = make_batch(d, cfg.translate, cfg.length, cfg.seed + 1, device)
    timed_names = [CONTROL, *encodings]  # everything timed against stock
    names = [STOCK, *timed_names]
    spec = SIZES[cfg.size]

    other_load = OtherLoad()
    config_start = t0 = time.perf_counter()
    models: dict[str, ModelUnderTest] = {}
    for name in names:
        model = build_model(name, cfg.size, d, cfg.seed, device, dtype=cfg.torch_dtype)
        models[name] = ModelUnderTest(
            name, model, make_generator(model, d, cfg.beam, cfg.length),
            {tuple(p.shape) for p in model.parameters()})
    log(f"[{cfg.key}] built {len(models)} models in {time.perf_counter() - t0:.1f}s")

    # Warm-up and memory round: each model's first calls, under the memory tracker.
    memory: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for name in names:
        m = models[name]
        optimizer = make_optimizer(m.model.parameters())
        init_optimizer_state(optimizer)
        memory[name] = {
            "train": measure_memory(lambda: train_step(m.model, optimizer, batch, pad),
                                    device, m.param_shapes),
            "forward": measure_memory(lambda: full_forward(m.model, batch), device,
                                      m.param_shapes),
            "translate": measure_memory(lambda: translate(m.model, m.generator, sources),
                                        device, m.param_shapes),
        }
        del optimizer
        m.model.zero_grad(set_to_none=True)
    log(f"[{cfg.key}] warm-up and memory round {time.perf_counter() - t0:.1f}s")

    def call(name: str, kind: str) -> float:
        return model_call(models[name], kind, batch, sources, pad, cfg.seed, device)

    times, ratios = interleave(
        timed_names, KINDS, call, cfg.reps, cfg.stock_every, cfg.seed,
        lambda rep, seconds: log(f"[{cfg.key}] repetition {rep + 1}/{cfg.reps} {seconds:.1f}s"))

    del models
    return {
        "size": cfg.size, "length": cfg.length, "dtype": cfg.dtype, "batch_sentences": cfg.batch,
        "translate_sentences": cfg.translate, "beam": cfg.beam, "reps": cfg.reps,
        "vocab": cfg.vocab, "seed": cfg.seed,
        "model": {k: v for k, v in spec.items()},
        "head_dim": spec["dim"] // spec["heads"],
        "stock_every": cfg.stock_every,
        "other_processes_cores": other_load.cores(),
        "seconds": time.perf_counter() - config_start,
        "times_s": times, "ratios": ratios, "memory": memory,
        "summary": summarize(cfg, names, times, ratios, memory),
    }


# --- layer level ----------------------------------------------------------------------
#
# The models differ from stock only in their self-attention layers (and, for the input
# encodings, in the position embedding), so an encoding's model-level overhead is that of
# its self-attention layers: with A the self-attention time and R the identical rest,
# (A_enc + R) / (A_stock + R) <= A_enc / A_stock whenever A_enc >= A_stock. Timing layers
# takes milliseconds instead of seconds, so many more repetitions fit in the same time and
# the ratio is measured to about a percent where the whole model's is lost in the machine's
# noise. The first layer of each stack computes the position terms that the stack shares
# (once per forward) and the later ones only read them, so both the first layer and the
# first two in a row are timed: their difference is what each later layer costs.

#: The layer-level counterparts of the model-level calls: ``train`` -- the first encoder
#: self-attention layer, forward + backward on the padded source batch, then the first
#: decoder self-attention layer likewise on the right-padded targets with fairseq's causal
#: mask (dropout on), then an Adam step over the layers' parameters and their encoding's
#: (see ``layer_parameters``); ``translate`` -- the encoder layer's forward on the sources to
#: translate, then the decoder layer over ``length + 1`` incremental steps for
#: ``sentences x beam`` rows, as beam search runs it.
LAYER_KINDS = ("train", "translate")
#: What is timed: each kind for the first layer of each stack alone, and (``_2``) for its
#: first two layers in a row, one position context as the stack runs them. The difference is what a
#: later layer costs: layers 2..L do the same work (the shared terms are the first's).
LAYER_CALLS = (*LAYER_KINDS, *(f"{kind}_2" for kind in LAYER_KINDS))


def position_scope(attn: torch.nn.Module, context: Optional[PositionContext] = None):
    """The stack's position scope (one for all its layers) opened as the stack opens it;
    stock layers have none."""
    if isinstance(attn, PositionalMultiheadAttention):
        return attn.scope.open(context)
    return contextlib.nullcontext()


def layer_parameters(attns: Sequence[torch.nn.Module]) -> list[torch.nn.Parameter]:
    """The parameters the layers' training step updates, each once: each layer's own and
    those of its position terms (its encoding's, its segment attention's), which the stack
    owns rather than the layer. A term the stack shares counts with the first layer, so
    the first two layers' list less the first's is what each later layer adds."""
    params: list[torch.nn.Parameter] = []
    for attn in attns:
        params.extend(attn.parameters())
        if isinstance(attn, PositionalMultiheadAttention):
            for term in (attn.encoding, *attn.position_terms()):
                if term is not None:
                    params.extend(term.parameters())
    return list(dict.fromkeys(params))  # tensors hash by identity


def attention_train(attns: Sequence[torch.nn.Module], x: torch.Tensor,
                    padding: Optional[torch.Tensor],
                    causal_mask: Optional[torch.Tensor] = None) -> None:
    """The layers in a row (each one's output is the next one's input), then backward."""
    with position_scope(attns[0]):
        for attn in attns:
            attn.train()
            x, _ = attn(x, x, x, key_padding_mask=padding, need_weights=False,
                        attn_mask=causal_mask)
    x.sum().backward()


def attention_encode(attns: Sequence[torch.nn.Module], x: torch.Tensor,
                     padding: Optional[torch.Tensor]) -> None:
    with torch.no_grad(), position_scope(attns[0]):
        for attn in attns:
            attn.eval()
            x, _ = attn(x, x, x, key_padding_mask=padding, need_weights=False)


def attention_decode(attns: Sequence[torch.nn.Module], steps: torch.Tensor) -> None:
    """Incremental steps through the layers in a row, one cache per layer (fairseq keys
    ``incremental_state`` by module) and one position context per generated sequence."""
    for attn in attns:
        attn.eval()
    state: dict = {}
    context = PositionContext(incremental=True)
    with torch.no_grad():
        for t in range(steps.size(0)):
            x = steps[t: t + 1]
            with position_scope(attns[0], context):
                for attn in attns:
                    x, _ = attn(x, x, x, incremental_state=state, need_weights=False)


def run_layer_config(cfg: Config, encodings: Sequence[str], device: torch.device,
                     log: Callable[[str], None]) -> dict[str, Any]:
    """Time the first (and the first two) encoder and decoder self-attention layers of
    each model against stock fairseq's ``MultiheadAttention`` (input encodings keep stock
    layers: skipped)."""
    d = shared_dictionary(cfg.vocab)
    pad = d.pad()
    spec = SIZES[cfg.size]
    attention_level = [e for e in encodings if not ENCODINGS[e].at_input]
    timed_names = [CONTROL, *attention_level]
    config_start = time.perf_counter()
    layers = {}
    for name in [STOCK, *timed_names]:
        model = build_model(name, cfg.size, d, cfg.seed, device, dtype=cfg.torch_dtype)
        layers[name] = ([layer.self_attn for layer in model.encoder.layers[:2]],
                        [layer.self_attn for layer in model.decoder.layers[:2]])
    # Adam over the layers timed (first, first two) with their encodings' parameters, its
    # state allocated untimed as at the model level: on CPU (for-loop Adam) the step over
    # an encoding's own parameters costs as much as a layer's forward. Learning rate 0:
    # the step does the same arithmetic, and the parameters stay put. Hundreds of steps on
    # the same batch at 1e-5 made stock's two layers (the most stepped) 2.5x slower after
    # about 550 steps, in the first run of this level.
    optimizers = {}
    for name in layers:
        for depth in (1, 2):
            encoder_attn, decoder_attn = (stack[:depth] for stack in layers[name])
            optimizer = make_optimizer(layer_parameters([*encoder_attn, *decoder_attn]), lr=0.0)
            init_optimizer_state(optimizer)
            optimizers[name, depth] = optimizer
    # the model level's batches: padded as fairseq pads them
    batch = make_batch(d, cfg.batch, cfg.length, cfg.seed, device)
    sources = make_batch(d, cfg.translate, cfg.length, cfg.seed + 1, device)
    src_padding = batch.src_tokens.eq(pad)
    tgt_padding = batch.prev_output_tokens.eq(pad)
    translate_padding = sources.src_tokens.eq(pad)
    causal = torch.triu(torch.full((cfg.length, cfg.length), float("-inf"), device=device), 1)
    gen = torch.Generator().manual_seed(cfg.seed)

    def states(length: int, rows: int, grad: bool) -> torch.Tensor:
        x = torch.randn(length, rows, spec["dim"], generator=gen).to(device, cfg.torch_dtype)
        return x.requires_grad_(grad)

    src, tgt = states(cfg.length, cfg.batch, True), states(cfg.length, cfg.batch, True)
    to_translate = states(cfg.length, cfg.translate, False)
    rows = cfg.translate * cfg.beam
    steps = states(cfg.length + 1, rows, False)

    def train(encoder_attn, decoder_attn, optimizer: torch.optim.Optimizer) -> None:
        attention_train(encoder_attn, src, src_padding)
        attention_train(decoder_attn, tgt, tgt_padding if tgt_padding.any() else None, causal)
        optimizer.step()

    def translate_layers(encoder_attn, decoder_attn) -> None:
        attention_encode(encoder_attn, to_translate, translate_padding)
        attention_decode(decoder_attn, steps)

    def call(name: str, kind: str) -> float:
        depth = 2 if kind.endswith("_2") else 1
        encoder_attn, decoder_attn = (stack[:depth] for stack in layers[name])
        if kind.startswith("train"):
            torch.manual_seed(cfg.seed)
            optimizer = optimizers[name, depth]
            seconds = timed(lambda: train(encoder_attn, decoder_attn, optimizer), device)
            optimizer.zero_grad(set_to_none=True)
            src.grad = tgt.grad = None
            return seconds
        return timed(lambda: translate_layers(encoder_attn, decoder_attn), device)

    times, ratios = warm_up_and_interleave(timed_names, LAYER_CALLS, call, cfg.layer_reps, 1,
                                           cfg.seed, log, f"layer/len{cfg.length}")
    del layers, optimizers
    stock_seconds = {k: median_seconds(times[STOCK][k]) for k in LAYER_CALLS}
    summary: dict[str, Any] = {"stock_seconds": stock_seconds, "models": {}}
    for name in timed_names:
        row: dict[str, Any] = {"later": {}}
        for kind in LAYER_KINDS:
            row[kind] = ratio_cell(ratios[name][kind], times[name][kind])
            row["later"][kind] = later_layer_cell(
                ratios[name][kind], ratios[name][f"{kind}_2"], stock_seconds[kind],
                stock_seconds[f"{kind}_2"])
        if name in TARGETS:
            # The stacks' ratio lies between the first and the later layers' ratios.
            row["bound"] = {}
            for kind, limit in zip(LAYER_KINDS, TARGETS[name]):
                worst = max(row[kind]["ratio"], row["later"][kind]["ratio"])
                row["bound"][kind] = {"limit": limit, "ratio": worst, "holds": worst <= limit}
        summary["models"][name] = row
    return {
        "level": "layer", "size": cfg.size, "length": cfg.length,
        "dtype": cfg.dtype, "batch_sentences": cfg.batch, "translate_sentences": cfg.translate,
        "decode_rows": rows, "beam": cfg.beam, "reps": cfg.layer_reps,
        "model": {k: v for k, v in spec.items()}, "seed": cfg.seed,
        "seconds": time.perf_counter() - config_start,
        "times_s": times, "ratios": ratios, "summary": summary,
    }


def later_layer_cell(first: Sequence[float], first_two: Sequence[float], stock_first: float,
                     stock_first_two: float) -> dict[str, Any]:
    """The second layer's ratio to stock's second layer, per repetition: its extra time,
    ``(r_12 - 1) S_12 - (r_1 - 1) S_1`` from the ratios of the first two layers (``r_12``)
    and of the first (``r_1``) to stock's median times ``S``, over ``S_12 - S_1``."""
    stock_later = stock_first_two - stock_first
    per_rep = [1 + ((r12 - 1) * stock_first_two - (r1 - 1) * stock_first) / stock_later
               for r1, r12 in zip(first, first_two)]
    return {**ratio_spread(per_rep), "stock_seconds": stock_later}


# --- rest level -----------------------------------------------------------------------
#
# Everything but the layers: embeddings (with fairseq's input position embeddings, where
# an encoding keeps them), the stacks' own code, the output projection, the loss, Adam, and
# beam search. Timed on the same models built with 0 layers per stack: what differs from
# stock there adds to the layers' difference (for the input encodings, whose layers are
# stock's, it is the whole difference).


def run_rest_config(cfg: Config, encodings: Sequence[str], device: torch.device,
                    log: Callable[[str], None]) -> dict[str, Any]:
    """Time the 0-layer models (``train`` and ``translate``, the model level's batches)
    against stock's, ``rest_reps`` times."""
    d = shared_dictionary(cfg.vocab)
    pad = d.pad()
    batch = make_batch(d, cfg.batch, cfg.length, cfg.seed, device)
    sources = make_batch(d, cfg.translate, cfg.length, cfg.seed + 1, device)
    timed_names = [CONTROL, *encodings]
    config_start = time.perf_counter()
    models = {}
    for name in [STOCK, *timed_names]:
        model = build_model(name, cfg.size, d, cfg.seed, device, layers=0,
                            dtype=cfg.torch_dtype)
        models[name] = ModelUnderTest(name, model, make_generator(model, d, cfg.beam, cfg.length))

    def call(name: str, kind: str) -> float:
        return model_call(models[name], kind, batch, sources, pad, cfg.seed, device)

    times, ratios = warm_up_and_interleave(timed_names, REST_KINDS, call, cfg.rest_reps, 2,
                                           cfg.seed, log, f"rest/len{cfg.length}")
    del models
    summary: dict[str, Any] = {
        "stock_seconds": {k: median_seconds(times[STOCK][k]) for k in REST_KINDS},
        "models": {name: {kind: ratio_cell(ratios[name][kind], times[name][kind])
                          for kind in REST_KINDS} for name in timed_names},
    }
    return {
        "level": "rest", "size": cfg.size, "length": cfg.length,
        "dtype": cfg.dtype, "batch_sentences": cfg.batch, "translate_sentences": cfg.translate, "beam": cfg.beam,
        "reps": cfg.rest_reps, "model": {k: v for k, v in SIZES[cfg.size].items()},
        "seed": cfg.seed, "seconds": time.perf_counter() - config_start,
        "times_s": times, "ratios": ratios, "summary": summary,
    }


def rest_markdown_table(result: dict[str, Any]) -> str:
    st = result["summary"]["stock_seconds"]
    lines = [
        f"### Everything but the layers ({result['model']['dim']} wide, 0 layers), length "
        f"{result['length']}" + dtype_note(result),
        "",
        f"Stock fairseq with 0 layers per stack: train {1000 * st['train']:.0f} ms/step "
        f"({result['batch_sentences']} sentences), translate {1000 * st['translate']:.0f} ms "
        f"({result['translate_sentences']} sentences, beam {result['beam']}, "
        f"{result['length'] + 1} steps). Ratios: median over {result['reps']} repetitions "
        "(interquartile range), each against the stock calls just before and after.",
        "",
        "| encoding | train | translate |",
        "|---|---|---|",
    ]
    for name, row in result["summary"]["models"].items():
        label = f"{STOCK} (2nd copy: noise control)" if name == CONTROL else name
        cells = [f"{row[k]['ratio']:.3f} ({row[k]['q1']:.2f}-{row[k]['q3']:.2f})"
                 for k in REST_KINDS]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def layer_markdown_table(result: dict[str, Any]) -> str:
    s = result["summary"]
    st = s["stock_seconds"]
    m = result["model"]
    lines = [
        f"### Self-attention layer ({m['dim']} wide, {m['heads']} heads), length "
        f"{result['length']}" + dtype_note(result),
        "",
        f"Stock fairseq `MultiheadAttention`: train {1000 * st['train']:.1f} ms for the first "
        f"layer, {1000 * (st['train_2'] - st['train']):.1f} ms for the second (encoder and "
        f"decoder self-attention, forward + backward + Adam step over the layers' and their "
        f"encoding's parameters, {result['batch_sentences']} sentences); translate "
        f"{1000 * st['translate']:.1f} ms and "
        f"{1000 * (st['translate_2'] - st['translate']):.1f} ms (encoder layer forward on "
        f"{result['translate_sentences']} sentences, decoder layer over {result['length'] + 1} "
        f"incremental steps of {result['decode_rows']} rows). First layer: median ratio over "
        f"{result['reps']} repetitions (interquartile range), each against the stock calls "
        "just before and after; later layers: the second layer's, from the first two timed "
        "in a row (the first computes the terms a stack shares). A model-level target holds "
        "if both are within it: the rest of the model is identical.",
        "",
        "| encoding | train: first layer | train: later layers | translate: first layer | "
        "translate: later layers | model-level target, bounded by the layers |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in s["models"].items():
        label = f"{STOCK} (2nd copy: noise control)" if name == CONTROL else name
        cells = [f"{c['ratio']:.3f} ({c['q1']:.2f}-{c['q3']:.2f})"
                 for k in LAYER_KINDS for c in (row[k], row["later"][k])]
        bound = row.get("bound")
        text = "- (no target)" if bound is None else "; ".join(
            f"{'train' if k == 'train' else 'transl'} <= {b['limit']:.2f} "
            f"{'holds' if b['holds'] else 'not shown'}" for k, b in bound.items())
        lines.append(f"| {label} | {' | '.join(cells)} | {text} |")
    return "\n".join(lines)


# --- summary and verdicts -------------------------------------------------------------


def quadratic_threshold(cfg: Config, sentences: int) -> int:
    """Elements of a ``len x len x d_h`` tensor per head for ``sentences`` sentences."""
    spec = SIZES[cfg.size]
    return sentences * spec["heads"] * cfg.length * cfg.length * (spec["dim"] // spec["heads"])


def summarize(cfg: Config, names: Sequence[str], times, ratios, memory) -> dict[str, Any]:
    stock_calls = {kind: [t for rep in times[STOCK][kind] for t in rep] for kind in KINDS}
    out: dict[str, Any] = {
        "stock_seconds": {k: median(stock_calls[k]) for k in KINDS},
        # how much identical stock calls vary within this run: the noise floor
        "stock_spread": {k: max(stock_calls[k]) / min(stock_calls[k]) for k in KINDS},
        "models": {},
    }
    sentences = {"train": cfg.batch, "forward": cfg.batch, "translate": cfg.translate}
    for name in names:
        row: dict[str, Any] = {}
        for kind in KINDS:
            if name == STOCK:
                per_rep = [1.0] * cfg.reps
            else:
                per_rep = ratios[name][kind]
            row[kind] = ratio_cell(per_rep, times[name][kind])
        mem = memory[name]
        row["peak_ratio"] = {k: mem[k]["peak_bytes"] / max(1, memory[STOCK][k]["peak_bytes"])
                             for k in KINDS}
        row["largest_rel"] = {k: mem[k]["largest_numel"] / quadratic_threshold(cfg, sentences[k])
                              for k in KINDS}
        row["quadratic_dh"] = [k for k in KINDS if row["largest_rel"][k] >= 1.0]
        row["verdict"] = verdict(name, row)
        out["models"][name] = row
    return out


def verdict(name: str, row: dict[str, Any]) -> dict[str, Any]:
    """PASS/FAIL against the targets; ``None`` where the encoding has none."""
    checks: dict[str, Any] = {}
    if name in TARGETS:
        for kind, limit in zip(("train", "translate"), TARGETS[name]):
            cell = row[kind]
            checks[kind] = {"limit": limit, "ratio": cell["ratio"],
                            "pass": cell["ratio"] <= limit,
                            # every repetition on the same side of the limit
                            "conclusive": cell["max"] <= limit or cell["min"] > limit}
    if name not in (STOCK, CONTROL):
        expected = name in QUADRATIC_DH
        checks["memory"] = {"expected_quadratic": expected,
                            "quadratic_in": row["quadratic_dh"],
                            "pass": bool(row["quadratic_dh"]) == expected}
    return checks


def fmt_ratio(cell: dict[str, float]) -> str:
    return f"{cell['ratio']:.3f} ({cell['min']:.2f}-{cell['max']:.2f})"


def verdict_text(name: str, checks: dict[str, Any],
                 from_parts: Optional[dict[str, float]] = None) -> str:
    parts = []
    for kind, short in (("train", "train"), ("translate", "transl")):
        if kind in checks:
            c = checks[kind]
            mark = "" if c["conclusive"] else "*"
            text = f"{short} <= {c['limit']:.2f} {'PASS' if c['pass'] else 'FAIL'}{mark}"
            if from_parts is not None and not c["pass"] and from_parts[kind] <= c["limit"]:
                text += " (parts PASS)"
            parts.append(text)
    mem = checks.get("memory")
    if mem is not None and (not mem["pass"] or mem["expected_quadratic"]):
        parts.append(f"memory {'PASS' if mem['pass'] else 'FAIL'}")
    if not parts:
        return "- (no target)"
    return "; ".join(parts)


def dtype_note(result: dict[str, Any]) -> str:
    """``, float16`` for half-precision runs (nothing for float32, as before --dtype)."""
    dtype = result.get("dtype", "float32")
    return "" if dtype == "float32" else f", {dtype}"


def markdown_table(result: dict[str, Any]) -> str:
    s = result["summary"]
    st = s["stock_seconds"]
    lines = [
        f"### {result['size']} ({result['model']['layers']}+{result['model']['layers']} layers, "
        f"{result['model']['dim']} wide, {result['model']['heads']} heads), source length "
        f"{result['length']}" + dtype_note(result),
        "",
        f"Stock fairseq: train {1000 * st['train']:.0f} ms/step ({result['batch_sentences']} "
        f"sentences), forward {1000 * st['forward']:.0f} ms, translate "
        f"{1000 * st['translate']:.0f} ms ({result['translate_sentences']} sentences, beam "
        f"{result['beam']}, {result['length'] + 1} steps); identical stock calls varied by "
        + " / ".join(f"x{s['stock_spread'][k]:.2f}" for k in KINDS)
        + " (max/min, train / forward / translate)"
        + ("" if result.get("other_processes_cores") is None else
           f"; other processes used {result['other_processes_cores']:.2f} cores meanwhile")
        + f". Ratios: median over {result['reps']} "
        f"repetitions (min-max), each against the stock calls just before and after; the "
        f"noise-control row times a second, identical stock model the same way.",
        "",
        "| encoding | train | forward | translate | peak mem train / fwd / transl | "
        "largest tensor / (B H len^2 d_h) | from parts: train / transl | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in s["models"].items():
        if name == STOCK:
            continue
        peak = " / ".join(f"{row['peak_ratio'][k]:.2f}" for k in KINDS)
        rel = max(row["largest_rel"].values())
        flag = (f"**{rel:.2f} len x len x d_h** ({', '.join(row['quadratic_dh'])})"
                if row["quadratic_dh"] else f"{rel:.3f}")
        label = f"{STOCK} (2nd copy: noise control)" if name == CONTROL else name
        parts = row.get("from_parts")
        parts_text = ("-" if parts is None
                      else " / ".join(f"{parts[k]:.3f}" for k in LAYER_KINDS))
        lines.append(f"| {label} | {fmt_ratio(row['train'])} | {fmt_ratio(row['forward'])} | "
                     f"{fmt_ratio(row['translate'])} | {peak} | {flag} | {parts_text} | "
                     f"{verdict_text(name, row['verdict'], parts)} |")
    return "\n".join(lines)


def encoding_adam_markdown(size: str, encodings: Sequence[str], device: torch.device,
                           steps: int = 15) -> str:
    """The optimizer's share of an encoding's cost: one Adam step over its own parameters
    (its self-attention layers' position terms: :func:`layer_parameters` less the layers'
    own), median of ``steps`` steps after one untimed, beside stock's step over all its
    parameters."""
    d = shared_dictionary(DEFAULTS["vocab"])

    def adam_seconds(params: list) -> float:
        if not params:
            return 0.0
        optimizer = make_optimizer(params)
        init_optimizer_state(optimizer)  # zero gradients: steps leave parameters unchanged
        for p in params:
            p.grad = torch.zeros_like(p)
        return median([timed(optimizer.step, device) for _ in range(steps)])

    stock = list(build_model(STOCK, size, d, 1, device).parameters())
    lines = [f"Adam step of stock fairseq ({size}) over its {sum(p.numel() for p in stock) / 1e6:.2f}M "
             f"parameters: {1000 * adam_seconds(stock):.1f} ms (median of {steps}).", "",
             "| encoding | own parameters | Adam step over them |", "|---|---|---|"]
    for name in encodings:
        model = build_model(name, size, d, 1, device)
        attns = [layer.self_attn for stack in (model.encoder, model.decoder)
                 for layer in stack.layers]
        layers_own = {id(p) for attn in attns for p in attn.parameters()}
        own = [p for p in layer_parameters(attns) if id(p) not in layers_own]
        lines.append(f"| {name} | {sum(p.numel() for p in own) / 1e6:.3f}M | "
                     f"{1000 * adam_seconds(own):.2f} ms |")
    return "\n".join(lines)


def summary_markdown(doc: dict[str, Any]) -> str:
    """One row per encoding over every size and length: its targets, the model ratio its
    measured parts account for (the worst configuration), the verdict, the range of the
    directly measured model medians, and the layer and rest ratios per length."""
    results, layer_results = doc["results"], doc.get("layer_results", [])
    rest_results = doc.get("rest_results", [])
    if not results:
        return ""
    n = len(results)
    columns = ([f"layers, len {r['length']}: train; transl" for r in layer_results]
               + [f"rest, len {r['length']}: train / transl" for r in rest_results])
    lines = [
        "### Summary over the configurations",
        "",
        f"*from parts*: the largest over the {n} configurations; *measured*: the range of "
        f"the {n} model-level medians; *layers*: first / later self-attention layers' "
        "ratios; *rest*: the 0-layer model's. Verdicts use *from parts* (the parts it "
        "counts in brackets) where every configuration has it, else the measured medians "
        "(`*`: some repetitions on the other side of the limit).",
        "",
        "| encoding | target: train / transl | from parts: train / transl | verdict | "
        "measured: train | measured: transl |" + "".join(f" {c} |" for c in columns),
        "|---|---|---|---|---|---|" + "---|" * len(columns),
    ]
    names = [CONTROL, *sorted(doc["encodings"], key=lambda e: (e not in TARGETS, e))]
    for name in names:
        rows = [r["summary"]["models"][name] for r in results]
        limits = TARGETS.get(name)
        from_parts = ([row["from_parts"] for row in rows]
                      if all("from_parts" in row for row in rows) else None)
        worst = (None if from_parts is None
                 else {k: max(f[k] for f in from_parts) for k in LAYER_KINDS})
        parts = (None if from_parts is None else
                 " + ".join(dict.fromkeys(p for row in rows for p in row["from_parts_of"])))
        verdicts = []
        for kind, limit in zip(LAYER_KINDS, limits or ()):
            short = "train" if kind == "train" else "transl"
            if worst is not None:
                ok = worst[kind] <= limit
                verdicts.append(f"{short} {'PASS' if ok else 'FAIL'} ({parts})")
                continue
            checks = [row["verdict"][kind] for row in rows]
            failed = [c for c in checks if not c["pass"]]
            mark = "*" if failed and not any(c["conclusive"] for c in failed) else ""
            verdicts.append(f"{short} {'FAIL' if failed else 'PASS'}{mark} "
                            f"({n - len(failed)}/{n} medians)")
        measured = [f"{min(row[k]['ratio'] for row in rows):.2f}-"
                    f"{max(row[k]['ratio'] for row in rows):.2f}" for k in LAYER_KINDS]
        layer_cells = []
        for layer in layer_results:
            row = layer["summary"]["models"].get(name)
            layer_cells.append("stock layers" if row is None else "; ".join(
                f"{row[k]['ratio']:.2f} / {row['later'][k]['ratio']:.2f}" for k in LAYER_KINDS))
        for rest in rest_results:
            row = rest["summary"]["models"][name]
            layer_cells.append(" / ".join(f"{row[k]['ratio']:.3f}" for k in REST_KINDS))
        label = f"{STOCK} (2nd copy: noise control)" if name == CONTROL else name
        cells = [label,
                 "-" if limits is None else f"{limits[0]:.2f} / {limits[1]:.2f}",
                 "-" if worst is None else f"{worst['train']:.3f} / {worst['translate']:.3f}",
                 "; ".join(verdicts) or "- (no target)", *measured, *layer_cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures(results: Sequence[dict[str, Any]],
             layer_results: Sequence[dict[str, Any]] = ()) -> list[str]:
    """Model-level targets not met, each with the ratio its measured parts account for
    (:func:`attach_part_estimates`); without model-level results, the layer ratios that
    do not show a target by themselves."""
    out = []
    if not results:
        for r in layer_results:
            for name, row in r["summary"]["models"].items():
                for kind, b in row.get("bound", {}).items():
                    if not b["holds"]:
                        out.append(f"len{r['length']} {name} {kind}: layer-level ratio "
                                   f"{b['ratio']:.3f} > {b['limit']:.2f}: the layers alone "
                                   "do not show the target")
        return out
    for r in results:
        for name, row in r["summary"]["models"].items():
            for kind, c in row["verdict"].items():
                if c["pass"]:
                    continue
                where = f"{r['size']}/len{r['length']}"
                if kind == "memory":
                    what = ("builds a len x len x d_h tensor" if c["quadratic_in"]
                            else "expected len x len x d_h tensor not seen")
                    out.append(f"{where} {name} memory: {what} {c['quadratic_in']}")
                    continue
                parts = row.get("from_parts", {}).get(kind)
                out.append(f"{where} {name} {kind}: {c['ratio']:.3f} > {c['limit']:.2f} "
                           f"(+{100 * (c['ratio'] / c['limit'] - 1):.1f}% over"
                           + ("" if c["conclusive"] else
                              ", inconclusive: some repetitions within the limit") + ")"
                           + ("" if parts is None else
                              f"; from its parts ({' + '.join(row['from_parts_of'])}): "
                              f"{parts:.3f}, "
                              + ("within the limit, so the target holds"
                                 if parts <= c["limit"] else "over the limit too")))
    return out


def attach_part_estimates(results: Sequence[dict[str, Any]],
                          layer_results: Sequence[dict[str, Any]],
                          rest_results: Sequence[dict[str, Any]] = ()) -> None:
    """The model-level ratio that the measured parts account for.

    A model is its ``L`` encoder and ``L`` decoder layers plus the rest (timed as the 0-layer
    model), and within the layers it differs from stock only in self-attention, where layers
    2..L of a stack all do the second layer's work. So a call's extra time is the rest's,
    the first self-attention layers', and ``L - 1`` times the second ones':
    ``ratio = 1 + ((r_0 - 1) S_0 + (r_1 - 1) S_1 + (L - 1)(r_2 - 1) S_2) / t_model`` with
    the ratios ``r`` of the rest, the first and the later self-attention layers
    (:func:`later_layer_cell`), stock's median times ``S`` of the same parts (encoder +
    decoder, the same batches) and model time ``t_model``. Input encodings keep stock's
    layers (no layer term); a part not timed (``--level``) is left out, and a model whose
    own layers were not timed gets no estimate. Stored per model row as ``from_parts``,
    with the parts used as ``from_parts_of``; per result, stock's shares of self-attention
    ``(S_1 + (L - 1) S_2) / t_model`` and of the rest ``S_0 / t_model``."""
    layers_at = {r["length"]: r for r in layer_results}
    rest_at = {r["length"]: r for r in rest_results}
    for r in results:
        layer, rest = layers_at.get(r["length"]), rest_at.get(r["length"])
        n_layers = r["model"]["layers"]
        t_model = r["summary"]["stock_seconds"]
        first = later = None
        if layer is not None:
            stock = layer["summary"]["stock_seconds"]
            first = {kind: stock[kind] for kind in LAYER_KINDS}
            later = {kind: stock[f"{kind}_2"] - stock[kind] for kind in LAYER_KINDS}
            r["summary"]["self_attention_share"] = {
                kind: (first[kind] + (n_layers - 1) * later[kind]) / t_model[kind]
                for kind in LAYER_KINDS}
        if rest is not None:
            r["summary"]["rest_share"] = {
                kind: rest["summary"]["stock_seconds"][kind] / t_model[kind]
                for kind in REST_KINDS}
        for name, row in r["summary"]["models"].items():
            if name == STOCK:
                continue
            own_layers = name == CONTROL or not ENCODINGS[name].at_input
            layer_row = None if layer is None else layer["summary"]["models"].get(name)
            rest_row = None if rest is None else rest["summary"]["models"].get(name)
            if (own_layers and layer_row is None) or (layer_row is None and rest_row is None):
                continue
            extra = {kind: 0.0 for kind in LAYER_KINDS}
            parts = []
            if layer_row is not None:
                parts.append("layers")
                for kind in LAYER_KINDS:
                    extra[kind] += ((layer_row[kind]["ratio"] - 1) * first[kind]
                                    + (n_layers - 1) * (layer_row["later"][kind]["ratio"] - 1)
                                    * later[kind])
            if rest_row is not None:
                parts.append("rest")
                for kind in REST_KINDS:
                    extra[kind] += ((rest_row[kind]["ratio"] - 1)
                                    * rest["summary"]["stock_seconds"][kind])
            row["from_parts"] = {kind: 1 + extra[kind] / t_model[kind] for kind in LAYER_KINDS}
            row["from_parts_of"] = parts


# --- machine ---------------------------------------------------------------------------


class OtherLoad:
    """CPU time other processes used while this one ran (Linux ``/proc/stat``), in cores:
    what competed with the measurements. None where ``/proc/stat`` is missing."""

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> Optional[tuple[float, float, float]]:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        # user nice system idle iowait irq softirq steal ...: busy = all but idle, iowait
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        own = sum(os.times()[:2])
        return time.perf_counter(), busy, own

    def cores(self) -> Optional[float]:
        end = self._sample()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        wall, busy, own = (b - a for a, b in zip(self.start, end))
        return max(0.0, (busy - own) / wall)



def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    info = {
        "cpu": cpu, "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch_threads": threads, "torch": torch.__version__, "python": platform.python_version(),
        "device": str(device), "platform": platform.platform(),
    }
    with contextlib.suppress(Exception):
        import fairseq
        info["fairseq"] = fairseq.__version__
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    with contextlib.suppress(Exception):
        info["git_commit"] = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
            check=True).stdout.strip()
    with contextlib.suppress(OSError):
        info["load_average_start"] = os.getloadavg()
    return info


# --- entry points ----------------------------------------------------------------------


@contextlib.contextmanager
def torch_threads(n: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def run(
    encodings: Optional[Sequence[str]] = None,
    sizes: Optional[Sequence[str]] = None,
    lengths: Optional[Sequence[int]] = None,
    reps: Optional[int] = None,
    stock_every: Optional[int] = None,
    batch: Optional[int] = None,
    translate_sentences: Optional[int] = None,
    vocab: Optional[int] = None,
    beam: Optional[int] = None,
    threads: Optional[int] = None,
    device: Optional[str] = None,
    seed: int = 1,
    quick: bool = False,
    levels: Sequence[str] = LEVELS,
    layer_reps: Optional[int] = None,
    rest_reps: Optional[int] = None,
    out_md: Optional[str] = None,
    out_json: Optional[str] = None,
    out_flat_json: Optional[str] = None,
    dtypes: Optional[Sequence[str]] = None,
    batch_tokens: Optional[int] = None,
    command: Optional[Sequence[str]] = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Run the benchmark; returns the JSON document (also written to ``out_json``)."""
    defaults = QUICK if quick else DEFAULTS
    encodings = list(encodings if encodings is not None
                     else defaults.get("encodings", sorted(ENCODINGS)))
    unknown = [e for e in encodings if e not in ENCODINGS]
    if unknown:
        raise ValueError(f"unknown encodings {unknown}; choose from {sorted(ENCODINGS)}")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and not quick:
        defaults = {**defaults, **CUDA_DEFAULTS}
        batch_tokens = batch_tokens or CUDA_DEFAULTS["batch_tokens"]
        translate_sentences = translate_sentences or CUDA_DEFAULTS["translate_sentences"]
    sizes = list(sizes or defaults["sizes"])
    lengths = [int(x) for x in (lengths or defaults["lengths"])]
    dtypes = list(dtypes or defaults.get("dtypes", ["float32"]))
    unknown_dtypes = [x for x in dtypes if x not in DTYPES]
    if unknown_dtypes:
        raise ValueError(f"unknown dtypes {unknown_dtypes}; choose from {sorted(DTYPES)}")
    if dev.type == "cpu" and set(dtypes) != {"float32"}:
        raise ValueError("--dtype float16 / bfloat16 measure what fairseq-train --fp16 / --bf16 "
                         "do, which needs CUDA; on CPU use float32 (the default)")
    threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                          else os.cpu_count() or 1)

    def per_length(table: dict[int, int], length: int, given: Optional[int]) -> int:
        if given:
            return given
        if length in table:
            return table[length]
        # not a default length: keep about as many tokens as the nearest default
        ref = min(table, key=lambda k: abs(k - length))
        return max(1, round(table[ref] * ref / length))

    unknown_sizes = [s for s in sizes if s not in SIZES]
    if unknown_sizes:
        raise ValueError(f"unknown sizes {unknown_sizes}; choose from {sorted(SIZES)}")
    configs = [
        Config(size=size, length=length, dtype=dtype,
               batch=(batch or max(1, batch_tokens // length) if batch_tokens
                      else per_length(defaults["batch"], length, batch)),
               translate=per_length(defaults["translate"], length, translate_sentences),
               reps=reps or defaults["reps"],
               stock_every=stock_every or defaults["stock_every"],
               beam=beam or defaults["beam"], vocab=vocab or defaults["vocab"], seed=seed,
               layer_reps=layer_reps or defaults["layer_reps"],
               rest_reps=rest_reps or defaults["rest_reps"])
        for dtype in dtypes for size in sizes for length in lengths]
    unknown_levels = [x for x in levels if x not in LEVELS]
    if unknown_levels or not levels:
        raise ValueError(f"levels must be among {LEVELS}, got {list(levels)}")

    started = time.time()
    info = machine_info(dev, threads)
    results, layer_results, rest_results = [], [], []
    with torch_threads(threads), warnings.catch_warnings():
        # stock fairseq passes a bool padding mask with a float causal mask
        warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask")
        if "model" in levels:
            for cfg in configs:
                results.append(run_config(cfg, encodings, dev, log))
                log(markdown_table(results[-1]))
        if "layer" in levels:
            # the layers of every size are alike (512 wide, 8 heads): once per length
            for cfg in configs_per_length(configs):
                layer_results.append(run_layer_config(cfg, encodings, dev, log))
                log(layer_markdown_table(layer_results[-1]))
        if "rest" in levels:
            # with 0 layers every size is the same model: once per length
            for cfg in configs_per_length(configs):
                rest_results.append(run_rest_config(cfg, encodings, dev, log))
                log(rest_markdown_table(rest_results[-1]))
    with contextlib.suppress(OSError):
        info["load_average_end"] = os.getloadavg()
    attach_part_estimates(results, layer_results, rest_results)
    doc = {
        "command": list(command) if command is not None else None,
        "machine": info,
        "wall_seconds": time.time() - started,
        "encodings": encodings,
        "targets": {k: {"train": v[0], "translate": v[1]} for k, v in TARGETS.items()},
        "levels": list(levels),
        "results": results,
        "layer_results": layer_results,
        "rest_results": rest_results,
        "failures": failures(results, layer_results),
    }
    md = markdown_document(doc)
    doc["markdown"] = md
    flat = json.dumps(flat_results(doc), indent=1) if out_flat_json else ""
    for path, text in ((out_md, md), (out_json, json.dumps(doc, indent=1)),
                       (out_flat_json, flat)):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(text + "\n")
    return doc


def configs_per_length(configs: Sequence[Config]) -> list[Config]:
    """The first configuration of each (length, dtype): the layer and rest levels are the
    same for every size (512 wide, 8 heads; 0 layers)."""
    firsts: dict[tuple[int, str], Config] = {}
    for cfg in configs:
        firsts.setdefault((cfg.length, cfg.dtype), cfg)
    return list(firsts.values())


def flat_results(doc: dict[str, Any]) -> dict[str, Any]:
    """One record per (encoding, size, length, dtype) of the model level: the median
    ratios to stock of a training step, of beam translation and of the training step's
    peak memory (``docs/benchmark-gpu.json``)."""
    records = []
    for result in doc["results"]:
        for name, row in result["summary"]["models"].items():
            if name == STOCK:
                continue
            records.append({
                "encoding": "stock (noise control)" if name == CONTROL else name,
                "size": result["size"], "length": result["length"],
                "dtype": result.get("dtype", "float32"),
                "batch_sentences": result["batch_sentences"],
                "train_ratio": row["train"]["ratio"],
                "translate_ratio": row["translate"]["ratio"],
                "memory_ratio": row["peak_ratio"]["train"],
            })
    m = doc["machine"]
    return {"device": m.get("gpu", m["device"]), "torch": m["torch"], "command": doc["command"],
            "results": records}


def markdown_document(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    head = [
        "## Position-encoding benchmark: ratio to stock fairseq `transformer`",
        "",
        f"Machine: {m['cpu']}, {m['usable_cores']} cores, torch {m['torch']} "
        f"({m['torch_threads']} threads), fairseq {m.get('fairseq', '?')}, device "
        f"`{m['device']}`{' (' + m['gpu'] + ')' if 'gpu' in m else ''}. "
        f"Wall time {doc['wall_seconds'] / 60:.1f} min.",
        "",
        f"Command: `{' '.join(doc['command']) if doc['command'] else 'run(...)'}`",
        "",
        "Ratios < 1 are faster than stock. Peak memory: live bytes allocated during the call "
        "over stock's. Largest tensor: the largest activation over `B * H * len^2 * d_h` "
        "(>= 1: a len x len x d_h tensor per head and sentence). Target verdicts use the "
        "median; `*`: the repetitions fall on both sides of the limit (not conclusive). "
        "Parts, each timed against stock's with many more repetitions: the first encoder "
        "and decoder self-attention layer of each model and the first two in a row (layer "
        "tables), and the model with 0 layers (rest tables). A model is its layers and the "
        "rest, its layers differ from stock's only in self-attention, and layers 2..L of a "
        "stack do the second layer's work, so its ratio is `1 + ((r_0 - 1) S_0 + (r_1 - 1) "
        "S_1 + (L - 1)(r_2 - 1) S_2) / t_model` (the rest's, first and later layers' ratios "
        "`r`, stock's times `S` of those parts and `t_model` of the model, `L` layers per "
        "stack): the *from parts* column, resolved to about a percent where the direct "
        "model ratio is not; *(parts PASS)*: the target holds by it.",
        "",
    ]
    summary = summary_markdown(doc)
    body = "\n\n".join(([summary] if summary else [])
                       + [markdown_table(r) for r in doc["results"]]
                       + [layer_markdown_table(r) for r in doc.get("layer_results", [])]
                       + [rest_markdown_table(r) for r in doc.get("rest_results", [])])
    fails = doc["failures"]
    tail = ["", "", "**Targets failed:** " + ("none" if not fails else "")]
    tail += [f"- {f}" for f in fails]
    return "\n".join(head) + "\n" + body + "\n".join(tail)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encodings", nargs="+", metavar="NAME",
                        help="encodings to compare with stock (default: all registered)")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES),
                        help="model sizes (default: small base)")
    parser.add_argument("--lengths", nargs="+", type=int, help="source lengths (default: 30 120)")
    parser.add_argument("--reps", type=int, help="repetitions (default 5)")
    parser.add_argument("--stock-every", type=int,
                        help="time stock again after every N encodings (default 3); each "
                             "encoding is compared with the two stock calls around it")
    parser.add_argument("--batch", type=int,
                        help="sentences per train/forward batch (default: 8 at length 30, 2 at "
                             "120, x4 on CUDA)")
    parser.add_argument("--translate-sentences", type=int,
                        help="sentences translated (default: 2 at length 30, 1 at 120, x4 on CUDA)")
    parser.add_argument("--vocab", type=int, help="shared vocabulary size (default 10000)")
    parser.add_argument("--beam", type=int, help="beam size (default 10)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all usable cores)")
    parser.add_argument("--device", help="cpu or cuda[:N] (default: cuda if available)")
    parser.add_argument("--dtype", nargs="+", choices=sorted(DTYPES),
                        help="precision of the models, as fairseq-train --fp16 / --bf16 "
                             "(default: float16 bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--batch-tokens", type=int,
                        help="training batch of about this many source tokens per length "
                             "(default on CUDA: 32768; on CPU the sentences of --batch)")
    parser.add_argument("--out-flat-json", metavar="PATH",
                        help="also write one record per encoding, length and dtype (train, "
                             "translate and memory ratios, device, torch), as "
                             "docs/benchmark-gpu.json")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--level", nargs="+", choices=[*LEVELS, "all"], default=["all"],
                        help="time whole models (model), their first self-attention layers "
                             "(layer), the models with 0 layers (rest), or all (default)")
    parser.add_argument("--layer-reps", type=int,
                        help="repetitions of the layer-level timings (default 30)")
    parser.add_argument("--rest-reps", type=int,
                        help="repetitions of the rest-level timings (default 20)")
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: tiny model, length 12, 2 repetitions, "
                             "sinusoidal, diet_rel, huang3")
    parser.add_argument("--out-md", default=os.path.join(ROOT, "runs", "benchmark.md"))
    parser.add_argument("--out-json", default=os.path.join(ROOT, "runs", "benchmark.json"))
    parser.add_argument("--encoding-adam", action="store_true",
                        help="time nothing else: an Adam step over each encoding's own "
                             "parameters, at the first --sizes")
    parser.add_argument("--render", metavar="JSON",
                        help="time nothing: print the Markdown report of an earlier run's "
                             "--out-json file, laid out by this version of the script")
    args = parser.parse_args(argv)
    if args.encoding_adam:
        logging.getLogger("fairseq").setLevel(logging.WARNING)
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        with torch_threads(args.threads or torch.get_num_threads()):
            print(encoding_adam_markdown((args.sizes or ["base"])[0],
                                         args.encodings or sorted(ENCODINGS), device))
        return
    if args.render:
        with open(args.render) as f:
            print(markdown_document(json.load(f)))
        return
    doc = run(encodings=args.encodings, sizes=args.sizes, lengths=args.lengths, reps=args.reps,
              stock_every=args.stock_every, batch=args.batch, translate_sentences=args.translate_sentences,
              vocab=args.vocab, beam=args.beam, threads=args.threads, device=args.device,
              seed=args.seed, quick=args.quick, out_md=args.out_md, out_json=args.out_json,
              out_flat_json=args.out_flat_json, dtypes=args.dtype, batch_tokens=args.batch_tokens,
              levels=LEVELS if "all" in args.level else tuple(dict.fromkeys(args.level)),
              layer_reps=args.layer_reps, rest_reps=args.rest_reps,
              command=[os.path.basename(sys.executable), *sys.argv] if argv is None
              else ["benchmark.py", *argv])
    print(doc["markdown"])


if __name__ == "__main__":
    # fairseq logs every model it builds (not set at import: tests import this module)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    main()
