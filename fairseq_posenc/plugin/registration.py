"""Registration with fairseq and torch: :func:`register`, and the import hook that calls it
once fairseq is imported (:func:`watch`, which the package's ``__init__`` calls). Why the
hook: the package's docstring (:mod:`fairseq_posenc`)."""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Optional, Sequence

#: the top-level package: its modules are watched as they execute
_PACKAGE = __name__.split(".")[0]

_registered = False


def register() -> None:
    """Register the model, its architectures, the tasks and the checkpoint globals with
    fairseq and torch (importing both), have fairseq name a damaged checkpoint file and
    copy checkpoints atomically (:mod:`.checkpoint_copies`), and make a resumed training
    continue as the uninterrupted run would: its batches
    (:mod:`.resume`) and ``--patience``'s count (:mod:`.patience`). Idempotent."""
    global _registered
    if _registered:
        return
    _stop_watching()  # this imports fairseq itself; the hook must not call back in here
    from .checkpoint import name_damaged_files, register_safe_globals

    register_safe_globals()
    name_damaged_files()  # a damaged checkpoint's error names its file
    from .checkpoint_copies import atomic_copies

    atomic_copies()  # and a killed training leaves none: fairseq's copies become atomic
    from .resume import pin_batch_order

    pin_batch_order()  # a resumed training continues with the uninterrupted run's batches
    from .patience import persist_patience

    persist_patience()  # and --patience counts on from where it stopped
    from . import models  # noqa: F401  (registers the model)
    from . import architectures  # noqa: F401  (then its architectures)
    from . import generation  # noqa: F401  (the translation_gnmt task)
    from . import extrapolation  # noqa: F401  (the translation_extrapolation task)

    _registered = True


class _Watch:
    """The import hook that calls :func:`register` once fairseq is imported, for a process
    that imported the package first.

    It finds no module itself: for ``fairseq`` and the package's modules it asks the other
    finders for the spec and has its loader check, right after executing the module,
    whether fairseq is loaded and none of the package's modules is still executing (a
    module of ours that imports fairseq at its top would otherwise be imported again,
    half-executed, by the registration); then it registers. Every other name passes. (A
    meta path finder needs only ``find_spec``; ``importlib.abc`` would cost its import.)"""

    def __init__(self) -> None:
        self.executing = 0  # modules of the package executing through the hook

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        ours = fullname.startswith(_PACKAGE + ".")
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


def watch() -> None:
    """Register now if fairseq is loaded (fairseq imports the package as its --user-dir, or
    a process imported fairseq first), else once it is (:class:`_Watch`)."""
    if "fairseq" in sys.modules:
        register()
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
