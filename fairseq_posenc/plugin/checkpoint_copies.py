"""Whole checkpoint files, whenever a training is killed.

fairseq 0.12 saves a checkpoint once, atomically (``torch_persistent_save`` writes
``NAME.tmp`` and renames it), and then copies it to every other name the save asks for
(``checkpoint_best.pt``, ``checkpoint_last.pt``) with ``PathManager.copy``, a plain
``shutil.copyfile``. A training killed during such a copy (a SLURM time limit, a closed
terminal, a kill of the whole command) leaves that file cut short: the run cannot resume
from ``checkpoint_last.pt``, and a cut ``checkpoint_best.pt`` is what ``--checkpoint best``
would evaluate. :func:`atomic_copies` gives ``fairseq.checkpoint_utils`` a ``PathManager``
whose ``copy`` of a local file writes ``DST.tmp`` and renames it over ``DST``, so each
checkpoint file is the old one or the new one, never a part; other paths (a path handler's
remote store) and every other method are fairseq's own.
"""

from __future__ import annotations

import os
import shutil

_atomic = False


def atomic_copies() -> None:
    """Replace ``fairseq.checkpoint_utils.PathManager`` (once), as the module docstring
    says."""
    global _atomic
    if _atomic:
        return
    from fairseq import checkpoint_utils

    manager = checkpoint_utils.PathManager

    class AtomicCopies(manager):
        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if manager.path_requires_pathmanager(dst_path):
                return manager.copy(src_path, dst_path, overwrite=overwrite)
            if os.path.exists(dst_path) and not overwrite:
                return False
            tmp = f"{dst_path}.tmp"
            shutil.copyfile(src_path, tmp)
            os.replace(tmp, dst_path)
            return True

    checkpoint_utils.PathManager = AtomicCopies
    _atomic = True
