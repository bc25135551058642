"""fairseq-posenc: Transformer position encodings for fairseq, behind one flag.

Use as a fairseq plugin: ``fairseq-train --user-dir fairseq_posenc --arch
transformer_wmt_en_de_diet_rel ...``. Importing the package registers the
``transformer_posenc`` model and its architectures, and the narrow ``torch.load``
allowlist that fairseq checkpoints need under torch's ``weights_only=True`` default.
"""

from .checkpoint import register_safe_globals

register_safe_globals()

from . import models  # noqa: E402,F401  (registers the model)
from . import architectures  # noqa: E402,F401  (then its architectures)
from . import generation  # noqa: E402,F401  (the translation_gnmt task)
from . import extrapolation  # noqa: E402,F401  (the translation_extrapolation task)

__version__ = "0.1.0"
