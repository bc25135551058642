"""``python -m fairseq_posenc.compare`` is ``posenc-compare``."""

from .cli import main

raise SystemExit(main())
