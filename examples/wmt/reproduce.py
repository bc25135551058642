#!/usr/bin/env python3
"""Train, translate, score and tabulate the papers' WMT experiments (examples/wmt/README.md).

A thin entry point: the reproduction is ``fairseq_posenc.tools.wmt.reproduce`` (also installed as
``posenc-reproduce``); the papers' tables and settings are ``fairseq_posenc/tools/wmt/recipes.py``::

    python examples/wmt/reproduce.py commands --paper diet
    python examples/wmt/reproduce.py train    --paper diet --row DIET-REL --column EN-DE --gpus 8
    python examples/wmt/reproduce.py evaluate --paper diet --row DIET-REL --column EN-DE
    python examples/wmt/reproduce.py table
    python examples/wmt/reproduce.py smoke    --work /tmp/smoke
"""

import sys

from fairseq_posenc.tools.wmt.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
