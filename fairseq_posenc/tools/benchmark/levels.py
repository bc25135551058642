"""The three levels: whole models, their first self-attention layers, and the rest.

Each level builds stock fairseq, the noise control and every encoding for one
configuration, feeds them the same :class:`Inputs`, times them against stock
(:func:`.timing.interleave`) and returns a typed record (:mod:`.records`):

* ``model`` (:func:`run_model_config`): a training step, a full forward and beam search of
  the whole models, after a warm-up round that is also the memory round;
* ``layer`` (:func:`run_layer_config`): the first (and the first two) encoder and decoder
  self-attention layers, the parts in which a model differs from stock;
* ``rest`` (:func:`run_rest_config`): the same models built with 0 layers per stack.

Why the parts are timed, and how: docs/benchmark-methodology.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from fairseq_posenc.plugin.build import toy_dictionary
from fairseq_posenc.core.encodings import ENCODINGS

from .machine import OtherLoad
from .memory import measure_memory
from .parts import later_layer_cell
from .records import (LayerResult, LayerSummary, Memory, ModelResult, Ratios,
                      RestResult, Times)
from .settings import CONTROL, LAYER_CALLS, LAYER_KINDS, REST_KINDS, STOCK, TARGETS, Config
from .targets import layer_bounds, summarize
from .timing import interleave, median_seconds, ratio_cell, timed, warm_up_and_interleave
from .workload import (Batch, attention_decode, attention_encode, attention_train, build_model,
                       full_forward, init_optimizer_state, layer_parameters, make_batch,
                       make_generator, make_optimizer, train_step, translate)

Log = Callable[[str], None]


@dataclass
class Inputs:
    """What every level feeds its models: the shared dictionary, the training batch and
    the sources to translate, padded as fairseq pads them."""
    dictionary: Dictionary
    batch: Batch
    sources: Batch

    @classmethod
    def for_config(cls, cfg: Config, device: torch.device) -> "Inputs":
        d = toy_dictionary(cfg.vocab)
        return cls(d, make_batch(d, cfg.batch, cfg.length, cfg.seed, device),
                   make_batch(d, cfg.translate, cfg.length, cfg.seed + 1, device))

    @property
    def pad(self) -> int:
        return self.dictionary.pad()


@dataclass
class ModelUnderTest:
    name: str
    model: torch.nn.Module
    generator: SequenceGenerator
    param_shapes: set = field(default_factory=set)


def build_models(names: Sequence[str], cfg: Config, inputs: Inputs, device: torch.device,
                 layers: Optional[int] = None) -> dict[str, ModelUnderTest]:
    """Every named model at ``cfg``'s size, seed and dtype, with its beam search."""
    models = {}
    for name in names:
        model = build_model(name, cfg.size, inputs.dictionary, cfg.seed, device, layers=layers,
                            dtype=cfg.torch_dtype, attention_dropout=cfg.attention_dropout)
        models[name] = ModelUnderTest(
            name, model, make_generator(model, inputs.dictionary, cfg.beam, cfg.length,
                                        half=cfg.torch_dtype != torch.float32),
            {tuple(p.shape) for p in model.parameters()})
    return models


def model_call(m: ModelUnderTest, kind: str, inputs: Inputs, seed: int,
               device: torch.device) -> float:
    """Seconds of one ``train`` step (a fresh Adam, its state allocated untimed),
    ``forward`` or ``translate`` call."""
    if kind == "train":
        torch.manual_seed(seed)
        optimizer = make_optimizer(m.model.parameters())
        init_optimizer_state(optimizer)
        seconds = timed(lambda: train_step(m.model, optimizer, inputs.batch, inputs.pad), device)
        del optimizer
        m.model.zero_grad(set_to_none=True)
        return seconds
    if kind == "forward":
        return timed(lambda: full_forward(m.model, inputs.batch), device)
    return timed(lambda: translate(m.model, m.generator, inputs.sources), device)


def _part_result(level: str, cfg: Config, reps: int, started: float, times: Times,
                 ratios: Ratios, summary: Any, decode_rows: Optional[int] = None) -> Any:
    """The layer or rest level's record (the layer level's adds ``decode_rows``)."""
    head: dict[str, Any] = {
        "level": level, "size": cfg.size, "length": cfg.length, "dtype": cfg.dtype,
        "batch_sentences": cfg.batch, "translate_sentences": cfg.translate}
    if decode_rows is not None:
        head["decode_rows"] = decode_rows
        head["stacks"] = cfg.layer_stacks
    return {**head, "beam": cfg.beam, "reps": reps, "model": dict(cfg.spec), "seed": cfg.seed,
            "seconds": time.perf_counter() - started, "times_s": times, "ratios": ratios,
            "summary": summary}


# --- model level ----------------------------------------------------------------------


def run_model_config(cfg: Config, encodings: Sequence[str], device: torch.device,
                     log: Log) -> ModelResult:
    """Time the whole models, and measure their memory, at one configuration."""
    inputs = Inputs.for_config(cfg, device)
    timed_names = [CONTROL, *encodings]  # everything timed against stock
    names = [STOCK, *timed_names]

    other_load = OtherLoad()
    config_start = t0 = time.perf_counter()
    models = build_models(names, cfg, inputs, device)
    log(f"[{cfg.key}] built {len(models)} models in {time.perf_counter() - t0:.1f}s")

    # Warm-up and memory round: each model's first calls, under the memory tracker.
    memory: dict[str, dict[str, Memory]] = {}
    out_of_memory: list[str] = []
    t0 = time.perf_counter()
    for name in names:
        m = models[name]
        optimizer = make_optimizer(m.model.parameters())
        init_optimizer_state(optimizer)
        calls = {
            "train": lambda: train_step(m.model, optimizer, inputs.batch, inputs.pad),
            "forward": lambda: full_forward(m.model, inputs.batch),
            "translate": lambda: translate(m.model, m.generator, inputs.sources),
        }
        try:
            memory[name] = {kind: measure_memory(calls[kind], device, m.param_shapes,
                                                 track=device.type != "cuda"
                                                 or kind != "translate")
                            for kind in cfg.kinds}
        except torch.OutOfMemoryError:
            if name == STOCK:
                raise
            # e.g. huang3's len x len x d_h tensor at 512 tokens x 32k: left out, and said
            out_of_memory.append(name)
            log(f"[{cfg.key}] {name}: out of memory on {device}; left out of the timings")
        del optimizer
        m.model.zero_grad(set_to_none=True)
        if name in out_of_memory:
            del models[name], m
            if device.type == "cuda":
                torch.cuda.empty_cache()
    log(f"[{cfg.key}] warm-up and memory round {time.perf_counter() - t0:.1f}s")
    timed_names = [n for n in timed_names if n not in out_of_memory]
    names = [STOCK, *timed_names]

    times, ratios = interleave(
        timed_names, cfg.kinds,
        lambda name, kind: model_call(models[name], kind, inputs, cfg.seed, device),
        cfg.reps, cfg.stock_every, cfg.seed,
        lambda rep, seconds: log(f"[{cfg.key}] repetition {rep + 1}/{cfg.reps} {seconds:.1f}s"))

    del models
    return {
        "size": cfg.size, "length": cfg.length, "dtype": cfg.dtype, "batch_sentences": cfg.batch,
        "kinds": list(cfg.kinds), "out_of_memory": out_of_memory,
        "translate_sentences": cfg.translate, "beam": cfg.beam, "reps": cfg.reps,
        "vocab": cfg.vocab, "seed": cfg.seed,
        "model": dict(cfg.spec),
        "head_dim": cfg.spec["dim"] // cfg.spec["heads"],
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


def run_layer_config(cfg: Config, encodings: Sequence[str], device: torch.device,
                     log: Log) -> LayerResult:
    """Time the first (and the first two) encoder and decoder self-attention layers of
    each model against stock fairseq's ``MultiheadAttention`` (input encodings keep stock
    layers: skipped)."""
    inputs = Inputs.for_config(cfg, device)
    attention_level = [e for e in encodings if not ENCODINGS[e].at_input]
    timed_names = [CONTROL, *attention_level]
    config_start = time.perf_counter()
    layers = {}
    for name in [STOCK, *timed_names]:
        model = build_model(name, cfg.size, inputs.dictionary, cfg.seed, device,
                            dtype=cfg.torch_dtype, attention_dropout=cfg.attention_dropout)
        encoder = [] if cfg.layer_stacks == "decoder" else model.encoder.layers[:2]
        layers[name] = ([layer.self_attn for layer in encoder],
                        [layer.self_attn for layer in model.decoder.layers[:2]])
    # Adam over the layers timed (first, first two) with their encodings' parameters, its
    # state allocated untimed as at the model level: on CPU (for-loop Adam) the step over
    # an encoding's own parameters costs as much as a layer's forward. Learning rate 0:
    # the step does the same arithmetic, and the parameters stay put, where hundreds of
    # steps on the same batch at a nonzero rate drift them and slow the layers stepped
    # most (stock's two) as the run goes on.
    optimizers = {}
    for name in layers:
        for depth in (1, 2):
            encoder_attn, decoder_attn = (stack[:depth] for stack in layers[name])
            optimizer = make_optimizer(layer_parameters([*encoder_attn, *decoder_attn]), lr=0.0)
            init_optimizer_state(optimizer)
            optimizers[name, depth] = optimizer
    pad = inputs.pad
    src_padding = inputs.batch.src_tokens.eq(pad)
    tgt_padding = inputs.batch.prev_output_tokens.eq(pad)
    translate_padding = inputs.sources.src_tokens.eq(pad)
    causal = torch.triu(torch.full((cfg.length, cfg.length), float("-inf"), device=device), 1)
    gen = torch.Generator().manual_seed(cfg.seed)

    def states(length: int, rows: int, grad: bool) -> torch.Tensor:
        x = torch.randn(length, rows, cfg.spec["dim"], generator=gen).to(device, cfg.torch_dtype)
        return x.requires_grad_(grad)

    src, tgt = states(cfg.length, cfg.batch, True), states(cfg.length, cfg.batch, True)
    to_translate = states(cfg.length, cfg.translate, False)
    rows = cfg.translate * cfg.beam
    steps = states(cfg.length + 1, rows, False)

    def train(encoder_attn, decoder_attn, optimizer: torch.optim.Optimizer) -> None:
        if encoder_attn:
            attention_train(encoder_attn, src, src_padding)
        attention_train(decoder_attn, tgt, tgt_padding if tgt_padding.any() else None, causal)
        optimizer.step()

    def translate_layers(encoder_attn, decoder_attn) -> None:
        if encoder_attn:
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
    return _part_result("layer", cfg, cfg.layer_reps, config_start, times, ratios,
                        layer_summary(timed_names, times, ratios, cfg.targets), decode_rows=rows)


def layer_summary(timed_names: Sequence[str], times: Times, ratios: Ratios,
                  targets: dict[str, tuple[float, float]] = TARGETS) -> LayerSummary:
    """Per model: the first layers' ratios, the later layers' (:func:`.parts.later_layer_cell`)
    and, for an encoding with targets, the bounds they give (:func:`.targets.layer_bounds`)."""
    stock_seconds = {k: median_seconds(times[STOCK][k]) for k in LAYER_CALLS}
    summary: LayerSummary = {"stock_seconds": stock_seconds, "models": {}}
    for name in timed_names:
        row: dict[str, Any] = {"later": {}}
        for kind in LAYER_KINDS:
            row[kind] = ratio_cell(ratios[name][kind], times[name][kind])
            row["later"][kind] = later_layer_cell(
                ratios[name][kind], ratios[name][f"{kind}_2"], stock_seconds[kind],
                stock_seconds[f"{kind}_2"])
        if name in targets:
            row["bound"] = layer_bounds(name, row, targets)
        summary["models"][name] = row
    return summary


# --- rest level -----------------------------------------------------------------------
#
# Everything but the layers: embeddings (with fairseq's input position embeddings, where
# an encoding keeps them), the stacks' own code, the output projection, the loss, Adam, and
# beam search. Timed on the same models built with 0 layers per stack: what differs from
# stock there adds to the layers' difference (for the input encodings, whose layers are
# stock's, it is the whole difference).


def run_rest_config(cfg: Config, encodings: Sequence[str], device: torch.device,
                    log: Log) -> RestResult:
    """Time the 0-layer models (``train`` and ``translate``, the model level's batches)
    against stock's, ``rest_reps`` times."""
    inputs = Inputs.for_config(cfg, device)
    timed_names = [CONTROL, *encodings]
    config_start = time.perf_counter()
    models = build_models([STOCK, *timed_names], cfg, inputs, device, layers=0)
    times, ratios = warm_up_and_interleave(
        timed_names, REST_KINDS,
        lambda name, kind: model_call(models[name], kind, inputs, cfg.seed, device),
        cfg.rest_reps, 2, cfg.seed, log, f"rest/len{cfg.length}")
    del models
    summary = {
        "stock_seconds": {k: median_seconds(times[STOCK][k]) for k in REST_KINDS},
        "models": {name: {kind: ratio_cell(ratios[name][kind], times[name][kind])
                          for kind in REST_KINDS} for name in timed_names},
    }
    return _part_result("rest", cfg, cfg.rest_reps, config_start, times, ratios, summary)
