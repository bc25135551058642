#!/usr/bin/env python
"""Parameter count of an architecture and what its position encoding adds over
``sinusoidal``: ``fairseq_posenc/tools/params.py`` (also the console script ``posenc-params``).

    python scripts/param_count.py --arch transformer_wmt_en_de_diet_rel [--vocab 32000] [MODEL FLAGS...]
"""

from fairseq_posenc.tools.params import counts, main  # noqa: F401  (tests load counts from this file)

if __name__ == "__main__":
    raise SystemExit(main())
