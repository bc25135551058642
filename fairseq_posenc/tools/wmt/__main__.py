"""``python -m fairseq_posenc.tools.wmt``: the WMT preparation's command line (:mod:`.cli`)."""

import sys

from .cli import main

sys.exit(main(prog="python -m fairseq_posenc.tools.wmt"))
