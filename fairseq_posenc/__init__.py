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

import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Optional, Sequence

__version__ = "0.1.0"

_registered = False


def register() -> None:
    """Register the model, its architectures, the tasks and the checkpoint globals with
    fairseq and torch (importing both). Idempotent."""
    global _registered
    if _registered:
        return
    _stop_watching()  # this imports fairseq itself; the hook must not call back in here
    from .checkpoint import register_safe_globals

    register_safe_globals()
    from . import models  # noqa: F401  (registers the model)
    from . import architectures  # noqa: F401  (then its architectures)
    from . import generation  # noqa: F401  (the translation_gnmt task)
    from . import extrapolation  # noqa: F401  (the translation_extrapolation task)

    _registered = True


class _Watch:
    """The import hook that calls :func:`register` once fairseq is imported, for a process
    that imported this package first.

    It finds no module itself: for ``fairseq`` and this package's modules it asks the other
    finders for the spec and has its loader check, right after executing the module,
    whether fairseq is loaded and none of this package's modules is still executing (a
    module of ours that imports fairseq at its top would otherwise be imported again,
    half-executed, by the registration); then it registers. Every other name passes. (A
    meta path finder needs only ``find_spec``; ``importlib.abc`` would cost its import.)"""

    def __init__(self) -> None:
        self.executing = 0  # modules of this package executing through the hook

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        ours = fullname.startswith(__name__ + ".")
        if fullname != "fairseq" and not ours:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        else:
            return None
        loader = spec.loader
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return spec  # only a loader object of this spec's own is changed
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            self.executing += ours
            try:
                execute(module)
            finally:
                self.executing -= ours
            if not self.executing and "fairseq" in sys.modules:
                register()

        loader.exec_module = exec_module
        return spec


_HOOK = _Watch()


def _stop_watching() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


if "fairseq" in sys.modules:
    register()  # fairseq imports us as its --user-dir, or a process imported it first
else:
    sys.meta_path.insert(0, _HOOK)
