"""Time per decoder self-attention layer and decoding step, each encoding's layers against
stock fairseq's ``MultiheadAttention``: the host's work of one layer in a step of beam
search (``docs/benchmark-host.md``), with the rest of the model left out.

    python docs/benchmark-host-runs/step_layers.py [--steps 60] [--reps 15] [--rows 1]
                                                   [ENCODING ...]

The benchmark's ``narrow`` model (6 decoder layers, 8 heads, width 64) on one CPU thread;
its decoder's self-attention layers run ``--steps`` incremental steps of ``--rows`` rows
in a row, as in :func:`fairseq_posenc.tools.benchmark.workload.attention_decode`. Every
repetition times each encoding once, with stock before and after it; the report gives the
median ratio.
"""

import argparse
import statistics
import time

import torch

from fairseq_posenc.tools.benchmark.settings import STOCK
from fairseq_posenc.tools.benchmark.workload import attention_decode, build_model
from fairseq_posenc.plugin.build import toy_dictionary
from fairseq_posenc.core.encodings import ENCODINGS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("encodings", nargs="*", metavar="ENCODING",
                        default=sorted(n for n, c in ENCODINGS.items() if not c.at_input))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rows", type=int, default=1, help="sentences x beam")
    args = parser.parse_args()
    torch.set_num_threads(1)
    d = toy_dictionary(1000)
    layers = {}
    for name in [STOCK, *args.encodings]:
        model = build_model(name, "narrow", d, 1, torch.device("cpu"))
        layers[name] = [layer.self_attn for layer in model.decoder.layers]
    steps = torch.randn(args.steps, args.rows, 64, generator=torch.Generator().manual_seed(0))
    def timed(name: str) -> float:
        start = time.perf_counter()
        attention_decode(layers[name], steps)
        return (time.perf_counter() - start) / (args.steps * len(layers[name]))

    # Stock before and after each encoding: each ratio is against the stock calls around
    # it, so that the machine's drift over a repetition cancels.
    names = [name for name in layers if name != STOCK]
    stock_times: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.reps):
        before = timed(STOCK)
        for name in names:
            seconds = timed(name)
            after = timed(STOCK)
            ratios[name].append(2 * seconds / (before + after))
            stock_times.append(after)
            before = after
    print(f"torch {torch.__version__}, {args.rows} row(s), {args.steps} steps, "
          f"{args.reps} repetitions; stock fairseq {statistics.median(stock_times) * 1e6:.1f} "
          "microseconds per layer and step; ratio to the stock calls around each call, "
          "median (interquartile range)")
    for name in names:
        q1, median, q3 = statistics.quantiles(ratios[name], n=4)
        print(f"{name:12s} {median:.3f} ({q1:.2f}-{q3:.2f})")


if __name__ == "__main__":
    main()
