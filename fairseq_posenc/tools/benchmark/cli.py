"""Speed and memory of every position encoding against stock fairseq ``transformer``.

    posenc-benchmark                                  # the full run (~60 min on 2 CPU cores)
    posenc-benchmark --quick                          # CI smoke run, about a minute
    posenc-benchmark --encodings t5 shaw --sizes small --lengths 30 --reps 3
    posenc-benchmark --level layer rest               # the parts only, ~25 min
    posenc-benchmark --render runs/benchmark.json     # a run's report again
    posenc-benchmark --merge a.json b.json --out-md docs/benchmark-gpu.md \
        --out-flat-json docs/benchmark-gpu.json       # GPU runs as one report

``python scripts/benchmark.py`` and ``python -m fairseq_posenc.tools.benchmark`` are the same
command. What is timed and how, the from-parts ratio, memory, the targets and the full
run's cost: docs/benchmark-methodology.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Optional, Sequence

from .machine import RUNS, make_folders
from .settings import DTYPES, KINDS, LEVELS, SIZES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Speed and memory of every position encoding against stock fairseq "
                    "transformer. What is timed and how: docs/benchmark-methodology.md.")
    p.add_argument("--encodings", nargs="+", metavar="NAME",
                   help="encodings to compare with stock (default: all registered)")
    p.add_argument("--sizes", nargs="+", choices=sorted(SIZES),
                   help="model sizes (default: small base)")
    p.add_argument("--lengths", nargs="+", type=int, help="source lengths (default: 30 120)")
    p.add_argument("--reps", type=int, help="repetitions (default 5)")
    p.add_argument("--stock-every", type=int,
                   help="time stock again after every N encodings (default 3); each "
                        "encoding is compared with the two stock calls around it")
    p.add_argument("--batch", type=int,
                   help="sentences per train/forward batch (default: 8 at length 30, 2 at "
                        "120, x4 on CUDA)")
    p.add_argument("--translate-sentences", type=int,
                   help="sentences translated (default: 2 at length 30, 1 at 120, x4 on CUDA)")
    p.add_argument("--vocab", type=int, help="shared vocabulary size (default 10000)")
    p.add_argument("--beam", type=int, help="beam size (default 10)")
    p.add_argument("--threads", type=int, help="torch threads (default: all usable cores)")
    p.add_argument("--device", help="cpu or cuda[:N] (default: cuda if available)")
    p.add_argument("--dtype", nargs="+", choices=sorted(DTYPES),
                   help="precision of the models, as fairseq-train --fp16 / --bf16 "
                        "(default: float16 bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--calls", nargs="+", choices=KINDS, default=list(KINDS),
                   help="the model level's calls to time (default: all); e.g. train alone "
                        "at lengths where beam search would take most of the run")
    p.add_argument("--batch-tokens", type=int,
                   help="training batch of about this many source tokens per length "
                        "(default on CUDA: 32768; on CPU the sentences of --batch)")
    p.add_argument("--out-flat-json", metavar="PATH",
                   help="also write one record per encoding, length and dtype (train, "
                        "translate and memory ratios, device, torch), as "
                        "docs/benchmark-gpu.json")
    p.add_argument("--attention-dropout", type=float, default=0.0, metavar="P",
                   help="every model's --attention-dropout (default 0, as "
                        "transformer_wmt_en_de; the recipes in examples/wmt train with 0.1)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the models' parameters and the batches (default 1)")
    p.add_argument("--level", nargs="+", choices=[*LEVELS, "all"], default=["all"],
                   help="time whole models (model), their first self-attention layers "
                        "(layer), the models with 0 layers (rest), or all (default)")
    p.add_argument("--layer-reps", type=int,
                   help="repetitions of the layer-level timings (default 30)")
    p.add_argument("--layer-stacks", choices=["both", "decoder"], default="both",
                   help="the layer level times the first self-attention layers of both "
                        "stacks (default), or of the decoder alone, every model's and "
                        "stock's: the measure of an encoding defined for the decoder only "
                        "(path, stickbreaking), whose encoder is stock's")
    p.add_argument("--rest-reps", type=int,
                   help="repetitions of the rest-level timings (default 20)")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke run: tiny model, length 12, 2 repetitions, "
                        "sinusoidal, diet_rel, huang3")
    p.add_argument("--out-md", default=str(RUNS / "benchmark.md"), metavar="PATH",
                   help="the Markdown report (default: runs/benchmark.md of the checkout, "
                        "or of the current directory for an installed package)")
    p.add_argument("--out-json", default=str(RUNS / "benchmark.json"), metavar="PATH",
                   help="every figure of the run, for --render and --merge (default: "
                        "runs/benchmark.json beside --out-md's default)")
    p.add_argument("--render", metavar="JSON",
                   help="time nothing: print the Markdown report of an earlier run's "
                        "--out-json file, laid out by this version of the script")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="time nothing: merge earlier runs' --out-json files (GPU runs split "
                        "to fit a lease) into --out-md and --out-flat-json, a later run's "
                        "figures replacing an earlier one's; docs/benchmark-gpu.md is made so")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    # fairseq logs every model it builds: quiet while the benchmark runs, then as it was
    # (a caller in the same process, a test, keeps fairseq's training log)
    fairseq_log = logging.getLogger("fairseq")
    level = fairseq_log.level
    fairseq_log.setLevel(logging.WARNING)
    try:
        return _main(args, argv)
    finally:
        fairseq_log.setLevel(level)


def _main(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> int:
    # the report modules read JSON; the runner imports fairseq, only for a run
    from .merged import merged_document
    from .report import markdown_document
    from .runner import run

    if args.render:
        with open(args.render) as f:
            print(markdown_document(json.load(f)))
        return 0
    if args.merge:
        docs = []
        for path in args.merge:
            with open(path) as f:
                docs.append(json.load(f))
        md, flat = merged_document(docs)
        make_folders(args.out_md, args.out_flat_json)
        with open(args.out_md, "w") as f:
            f.write(md)
        if args.out_flat_json:
            with open(args.out_flat_json, "w") as f:
                f.write(json.dumps(flat, indent=1) + "\n")
        print(md.split("\n\n# Run 1")[0])
        return 0
    doc = run(encodings=args.encodings, sizes=args.sizes, lengths=args.lengths, reps=args.reps,
              stock_every=args.stock_every, batch=args.batch,
              translate_sentences=args.translate_sentences, vocab=args.vocab, beam=args.beam,
              threads=args.threads, device=args.device, seed=args.seed, quick=args.quick,
              out_md=args.out_md, out_json=args.out_json, out_flat_json=args.out_flat_json,
              dtypes=args.dtype, batch_tokens=args.batch_tokens, kinds=args.calls,
              attention_dropout=args.attention_dropout, layer_stacks=args.layer_stacks,
              levels=LEVELS if "all" in args.level else tuple(dict.fromkeys(args.level)),
              layer_reps=args.layer_reps, rest_reps=args.rest_reps,
              command=[os.path.basename(sys.executable), *sys.argv] if argv is None
              else ["benchmark.py", *argv])
    print(doc["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
