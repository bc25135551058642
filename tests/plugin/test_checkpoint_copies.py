"""A training killed while fairseq copies a checkpoint leaves the old file whole
(``plugin/checkpoint_copies.py``).

The kill is simulated inside the copy: the byte copy writes half the file and is then
interrupted, as a SIGKILL would leave it. The reference is fairseq's own ``PathManager.copy``
under the same interruption, which leaves the destination cut short.
"""

from __future__ import annotations

import shutil

import pytest

import fairseq_posenc


class Killed(BaseException):
    pass


def interrupted_copy(src, dst, *args, **kwargs):
    data = open(src, "rb").read()
    with open(dst, "wb") as f:
        f.write(data[: len(data) // 2])
    raise Killed


@pytest.mark.parametrize("atomic", [True, False])
def test_a_copy_killed_half_way_leaves_the_old_checkpoint_whole(tmp_path, monkeypatch, atomic):
    fairseq_posenc.register()
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    manager = checkpoint_utils.PathManager if atomic else PathManager
    src, dst = tmp_path / "checkpoint_3_600.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new state " * 1000)
    dst.write_bytes(b"old state " * 1000)
    monkeypatch.setattr(shutil, "copyfile", interrupted_copy)
    with pytest.raises(Killed):
        manager.copy(str(src), str(dst), overwrite=True)
    if atomic:
        assert dst.read_bytes() == b"old state " * 1000  # whole: the run resumes from it
    else:
        assert len(dst.read_bytes()) == 5000  # fairseq alone: cut short
    monkeypatch.undo()
    assert checkpoint_utils.PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == src.read_bytes() and not (tmp_path / "checkpoint_last.pt.tmp"
                                                         ).exists()
