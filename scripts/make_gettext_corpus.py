#!/usr/bin/env python3
"""Build a real English-German parallel corpus (train, valid, test) from the German gettext
catalogs of pinned Debian packages: ``fairseq_posenc/tools/gettext_corpus/`` (the source,
the cleaning and the counts: docs/real-corpus.md).

    python scripts/make_gettext_corpus.py --out data/gettext
    posenc-compare runs/gettext --data data/gettext -s en -t de --encodings sinusoidal t5 ...
"""

from fairseq_posenc.tools.gettext_corpus.corpus_build import main

if __name__ == "__main__":
    raise SystemExit(main())
