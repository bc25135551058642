#!/usr/bin/env python3
"""Download and prepare a WMT dataset of the papers for fairseq (examples/wmt/README.md).

A thin entry point: the preparation is the package ``fairseq_posenc.tools.wmt`` (its command
line: ``fairseq_posenc.tools.wmt.cli``, also installed as ``posenc-prepare-wmt``)::

    python examples/wmt/prepare.py DATASET --dest DIR [options]
    python examples/wmt/prepare.py --list
    python examples/wmt/prepare.py detokenize --lang L [--bpe B] < hyp > hyp.detok
"""

import sys

from fairseq_posenc.tools.wmt.cli import main

if __name__ == "__main__":
    sys.exit(main())
