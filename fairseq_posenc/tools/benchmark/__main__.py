"""``python -m fairseq_posenc.tools.benchmark``: the benchmark's command line (:mod:`.cli`)."""

from .cli import main

raise SystemExit(main())
