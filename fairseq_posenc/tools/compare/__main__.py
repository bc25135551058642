"""``python -m fairseq_posenc.tools.compare`` is ``posenc-compare``."""

from .cli import main

raise SystemExit(main())
