"""Operators one incremental decoder step dispatches (views excluded), per encoding and for
stock fairseq: what a GPU launches per step of beam search (``docs/benchmark-host.md``).

    python docs/benchmark-host-runs/count_step_ops.py [ENCODING ...]

The benchmark's base model (6+6 layers) on CPU in float32, beam 4 over 4 sentences of 24
tokens; the decoder's sixth step is counted. Half precision on a GPU adds casts that
float32 does not have.
"""

import collections
import sys

import torch
from fairseq.sequence_generator import SequenceGenerator
from torch.utils._python_dispatch import TorchDispatchMode

from fairseq_posenc.tools.benchmark.workload import build_model, make_batch
from fairseq_posenc.plugin.build import toy_dictionary

VIEWS = {"view", "_unsafe_view", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
         "slice", "select", "as_strided", "alias", "detach", "reshape", "unbind", "split",
         "narrow", "split_with_sizes", "unfold", "view_as_real", "view_as_complex",
         "lift_fresh", "empty", "empty_like", "new_empty", "empty_strided", "promote_types",
         "_local_scalar_dense", "sym_size", "sym_stride"}


class Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name not in VIEWS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def step_ops(name: str, d, batch) -> collections.Counter:
    model = build_model(name, "base", d, 1, torch.device("cpu")).eval()
    generator = SequenceGenerator([model], d, beam_size=4, max_len_a=0, max_len_b=12,
                                  min_len=12)
    decoder, calls, counted = generator.model.forward_decoder, [0], {}

    def forward_decoder(*args, **kwargs):
        calls[0] += 1
        if calls[0] != 6:
            return decoder(*args, **kwargs)
        with Count() as count:
            out = decoder(*args, **kwargs)
        counted["ops"] = count.ops
        return out

    generator.model.forward_decoder = forward_decoder
    sample = {"net_input": {"src_tokens": batch.src_tokens, "src_lengths": batch.src_lengths}}
    with torch.no_grad():
        generator.generate([model], sample)
    return counted["ops"]


def main() -> None:
    d = toy_dictionary(1000)
    batch = make_batch(d, 4, 24, 0, torch.device("cpu"))
    stock = step_ops("stock", d, batch)
    print(f"stock: {sum(stock.values())} operators per decoder step")
    for name in sys.argv[1:]:
        ops = step_ops(name, d, batch)
        extra = {k: ops[k] - stock[k] for k in sorted(set(ops) | set(stock)) if ops[k] != stock[k]}
        print(f"{name}: {sum(ops.values())} ({', '.join(f'{k} {v:+d}' for k, v in extra.items())})")


if __name__ == "__main__":
    main()
