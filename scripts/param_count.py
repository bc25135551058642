#!/usr/bin/env python
"""Parameter count of an architecture, and what its position encoding adds over
``sinusoidal`` at the same size (the "Parameters, +Delta" columns of DIET's Table 6).

    python scripts/param_count.py --arch transformer_wmt_en_de_diet_rel [--vocab 32000] [MODEL FLAGS...]

Builds the model from fairseq's own argument parsing (any model flag applies, e.g.
``--diet-abs-sharing none`` or ``--max-source-positions 256``) with a joined dictionary of
``--vocab`` types, counting shared parameters once.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fairseq_posenc  # noqa: E402,F401  (registers the model)
from fairseq import options  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.tasks.translation import TranslationTask  # noqa: E402


def count(args: argparse.Namespace, vocab: int) -> int:
    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    model = TranslationTask(args, d, d).build_model(args)
    return sum(p.numel() for p in model.parameters())  # parameters() yields shared ones once


def counts(arch: str, flags: list[str], vocab: int) -> tuple[int, int]:
    """(parameters of ``arch``, parameters of the same size with ``sinusoidal``)."""
    args = options.parse_args_and_arch(
        options.get_training_parser(), ["unused", "--task", "translation", "--arch", arch, *flags])
    baseline = copy.deepcopy(args)  # before build_model sets the position flags in place
    baseline.arch, baseline.pos_encoding = "transformer_posenc", "sinusoidal"
    return count(args, vocab), count(baseline, vocab)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", required=True)
    parser.add_argument("--vocab", type=int, default=32000, help="joined dictionary size")
    known, flags = parser.parse_known_args()
    total, base = counts(known.arch, flags, known.vocab)
    delta = total - base
    print(f"{known.arch}\tparameters {total:,}\t+{delta:,} ({100 * delta / base:+.2f}%) "
          f"over sinusoidal ({base:,}), vocabulary {known.vocab:,}")


if __name__ == "__main__":
    main()
