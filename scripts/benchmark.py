#!/usr/bin/env python
"""Speed and memory of every position encoding against stock fairseq ``transformer``:
``fairseq_posenc/tools/benchmark/`` (also the console script ``posenc-benchmark``).

    python scripts/benchmark.py --quick     # CI smoke run; --help for the rest

Methodology: docs/benchmark-methodology.md.
"""

from fairseq_posenc.tools.benchmark.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
