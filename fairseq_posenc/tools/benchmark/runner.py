"""A whole benchmark run: its configurations resolved, the levels run, the report written.

:func:`run` is the API (the CLI, :mod:`.cli`, parses flags into it); it returns the JSON
document (:class:`.records.Document`) and writes the Markdown, JSON and flat JSON files.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from typing import Callable, Optional, Sequence

import torch

from fairseq_posenc.core.encodings import ENCODINGS

from .levels import run_layer_config, run_model_config, run_rest_config
from .machine import machine_info, make_folders, torch_threads, usable_cores
from .parts import attach_part_estimates
from .records import Document, LayerResult, ModelResult, RestResult
from .report import flat_results, layer_table, markdown_document, model_table, rest_table
from .settings import (CUDA_DEFAULTS, DEFAULTS, DTYPES, KINDS, LEVELS, QUICK, SIZES,
                       configs_per_length, make_configs, targets_for)
from .targets import failures


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
    kinds: Sequence[str] = KINDS,
    attention_dropout: float = 0.0,
    layer_stacks: str = "both",
    command: Optional[Sequence[str]] = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> Document:
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
    threads = threads or usable_cores()
    unknown_sizes = [s for s in sizes if s not in SIZES]
    if unknown_sizes:
        raise ValueError(f"unknown sizes {unknown_sizes}; choose from {sorted(SIZES)}")
    if not 0.0 <= attention_dropout < 1.0:
        raise ValueError(f"--attention-dropout must be in [0, 1), got {attention_dropout}")
    configs = make_configs(
        defaults, sizes, lengths, dtypes, seed, batch=batch, batch_tokens=batch_tokens,
        translate_sentences=translate_sentences, reps=reps, stock_every=stock_every, beam=beam,
        vocab=vocab, layer_reps=layer_reps, rest_reps=rest_reps, kinds=kinds,
        device_type=dev.type, attention_dropout=attention_dropout, layer_stacks=layer_stacks)
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"calls must be among {KINDS}, got {list(kinds)}")
    unknown_levels = [x for x in levels if x not in LEVELS]
    if unknown_levels or not levels:
        raise ValueError(f"levels must be among {LEVELS}, got {list(levels)}")

    make_folders(out_md, out_json, out_flat_json)

    started = time.time()
    info = machine_info(dev, threads)
    results: list[ModelResult] = []
    layer_results: list[LayerResult] = []
    rest_results: list[RestResult] = []
    with torch_threads(threads), warnings.catch_warnings():
        # stock fairseq passes a bool padding mask with a float causal mask
        warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask")
        if "model" in levels:
            for cfg in configs:
                results.append(run_model_config(cfg, encodings, dev, log))
                log(model_table(results[-1]))
                if out_json:  # what a later configuration's crash would otherwise lose
                    with open(out_json + ".partial", "w") as f:
                        json.dump({"results": results}, f, indent=1)
        if "layer" in levels:
            # the layers of every size are alike (512 wide, 8 heads): once per length
            for cfg in configs_per_length(configs):
                layer_results.append(run_layer_config(cfg, encodings, dev, log))
                log(layer_table(layer_results[-1]))
        if "rest" in levels:
            # with 0 layers every size is the same model: once per length
            for cfg in configs_per_length(configs):
                rest_results.append(run_rest_config(cfg, encodings, dev, log))
                log(rest_table(rest_results[-1]))
    with contextlib.suppress(OSError):
        info["load_average_end"] = os.getloadavg()
    attach_part_estimates(results, layer_results, rest_results)
    doc: Document = {
        "command": list(command) if command is not None else None,
        "machine": info,
        "wall_seconds": time.time() - started,
        "encodings": encodings,
        "targets": {k: {"train": v[0], "translate": v[1]}
                    for k, v in targets_for(dev.type).items()},
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
            with open(path, "w") as f:
                f.write(text + "\n")
    return doc
