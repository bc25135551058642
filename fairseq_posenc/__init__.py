"""fairseq-posenc: Transformer position encodings for fairseq, behind one flag.

Use as a fairseq plugin: ``fairseq-train --user-dir fairseq_posenc --arch
transformer_wmt_en_de_diet_rel ...``. :func:`register` registers the ``transformer_posenc``
model, its architectures, the ``translation_gnmt`` and ``translation_extrapolation`` tasks,
and the narrow ``torch.load`` allowlist that fairseq checkpoints need under torch's
``weights_only=True`` default.

Registration needs fairseq, whose import takes seconds, so importing the package does not
import fairseq: the command-line tools that only read text (``posenc-score``,
``posenc-prepare-corpus``, ``posenc-prepare-wmt``, every ``--help``) start at once. The
registrations are made as soon as both fairseq and this package are imported, in either
order: at import when fairseq is already loaded (fairseq's ``--user-dir`` imports the
package after itself), else right after fairseq's own import. The second case matters
because fairseq's ``import_user_module`` skips a package that is already imported. Tools
that run fairseq call :func:`register` as well, which does nothing the second time.
"""

from __future__ import annotations

from .plugin.registration import register, watch

__version__ = "0.1.0"
__all__ = ["register"]

watch()
