"""A damaged checkpoint (cut off by a full disk or a killed copy) and a file that is not a
fairseq-posenc checkpoint give an error that names the file and says what to do, wherever
one is read: ``fairseq-train`` resuming from ``checkpoint_last.pt``, ``fairseq-generate``,
the tools' own reads (``checkpoint_limits`` before a translation, ``average_checkpoints``,
``posenc-inspect``) -- never torch's "PytorchStreamReader failed reading zip archive" alone.

The reference for "damaged": torch's own ``torch.load`` fails on the same bytes.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc import register
from fairseq_posenc.plugin.checkpoint import DamagedCheckpoint, load
from fairseq_posenc.plugin.extrapolation import checkpoint_limits

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"


def cut(source: Path, dest: Path, keep: float) -> Path:
    """``dest``: the first ``keep`` of ``source``'s bytes, as a killed copy leaves it."""
    data = source.read_bytes()
    dest.write_bytes(data[:int(len(data) * keep)])
    return dest


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.999])
def test_a_cut_off_file_is_named_with_what_to_do(tmp_path, keep):
    whole = tmp_path / "whole.pt"
    torch.save({"model": {"w": torch.arange(1000.0)}, "args": argparse.Namespace(a=1)}, whole)
    damaged = cut(whole, tmp_path / "checkpoint_last.pt", keep)
    with pytest.raises(Exception) as torchs:  # torch's own error names no file
        torch.load(damaged, map_location="cpu", weights_only=True)
    assert str(damaged) not in str(torchs.value)
    with pytest.raises(DamagedCheckpoint) as error:
        load(damaged)
    says = str(error.value)
    assert says.startswith(f"{damaged} is damaged: torch cannot read it (")
    assert "Delete it" in says and "starts again from scratch" in says
    assert torch.equal(load(whole)["model"]["w"], torch.arange(1000.0))


def test_a_whole_file_that_weights_only_refuses_is_not_called_damaged(tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save({"model": {}, "odd": argparse.ArgumentParser}, path)  # a class: not allowed
    with pytest.raises(Exception) as error:
        load(path)
    assert not isinstance(error.value, DamagedCheckpoint)
    assert "Weights only load failed" in str(error.value)


@pytest.mark.parametrize("name", ["rope", "sinusoidal", "t5"])
def test_a_state_dict_file_is_not_taken_for_a_checkpoint(name):
    """The legacy fixtures hold a model's state dict and its flags, not what fairseq-train
    saves: checkpoint_limits (what every translation reads first) says so."""
    path = LEGACY / f"{name}.pt"
    with pytest.raises(ValueError) as error:
        checkpoint_limits(path)
    says = str(error.value)
    assert says.startswith(f"{path} is not a checkpoint of a fairseq-posenc model: it holds "
                           "no model configuration (its entries: commit, encoding, flags")
    assert "fairseq-train wrote with --user-dir fairseq_posenc" in says


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny rope model trained for 4 updates, its checkpoint of update 2 kept as an
    interval checkpoint would be (checkpoint_best.pt is not: fairseq keeps the best loss of
    an earlier training in the same process): its data and save directory."""
    root = tmp_path_factory.mktemp("damaged")
    cu.create_parallel_corpus(root / "raw", num_train=60, num_valid=8, num_test=5)
    cu.preprocess_translation_data(root / "raw", root / "bin")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for updates in (2, 4):
            cu.train_translation_model(root / "bin", root / "ckpt", "transformer_tiny_rope",
                                       max_update=updates)
            if updates == 2:
                shutil.copyfile(root / "ckpt" / "checkpoint_last.pt",
                                root / "ckpt" / "checkpoint_1_2.pt")
    finally:
        torch.set_num_threads(threads)
    return root


@pytest.mark.slow  # a tiny model trained for 4 updates, then resumed from a cut-off file
def test_fairseq_train_and_generate_name_a_cut_off_checkpoint(trained, tmp_path, caplog):
    register()
    save = tmp_path / "ckpt"
    shutil.copytree(trained / "ckpt", save)
    last = save / "checkpoint_last.pt"
    cut(trained / "ckpt" / "checkpoint_last.pt", last, 0.5)
    with pytest.raises(DamagedCheckpoint, match=f"^{last} is damaged: .*Delete it"):
        cu.train_translation_model(trained / "bin", save, "transformer_tiny_rope", max_update=6)
    with pytest.raises(DamagedCheckpoint, match=f"^{last} is damaged"):
        cu.generate_main(trained / "bin", last)
    # the advice holds: an earlier checkpoint of the run copied over it resumes from there
    shutil.copyfile(save / "checkpoint_1_2.pt", last)
    with caplog.at_level(logging.INFO, logger="fairseq.trainer"):
        cu.train_translation_model(trained / "bin", save, "transformer_tiny_rope",
                                   max_update=6)
    assert re.search(f"Loaded checkpoint {re.escape(str(last))} \\(epoch \\d+ @ 2 updates\\)",
                     caplog.text)  # fairseq's own log of the resumption
    assert load(last)["optimizer_history"][-1]["num_updates"] == 6


@pytest.mark.slow  # uses the trained model
def test_the_tools_name_a_cut_off_checkpoint(trained, tmp_path, capsys):
    from fairseq_posenc.tools.experiment import checkpoints
    from fairseq_posenc.tools.experiment.translate import translate
    from fairseq_posenc.tools.inspection.cli import main as inspect_main

    good = trained / "ckpt" / "checkpoint_last.pt"
    assert checkpoint_limits(good).source == 1024  # a whole checkpoint reads as before
    damaged = cut(good, tmp_path / "checkpoint_last.pt", 0.7)
    with pytest.raises(SystemExit, match=f"^{damaged} is damaged"):
        translate(trained / "bin", damaged, "test", cu.SRC, cu.TGT, tmp_path / "generate",
                  {"bpe": "subword-nmt"}, hyp_path=tmp_path / "hyp.txt")
    assert not (tmp_path / "generate").exists()  # fairseq-generate never started
    with pytest.raises(SystemExit, match=f"^{damaged} is damaged"):
        checkpoints.average_checkpoints([trained / "ckpt" / "checkpoint_1_2.pt", damaged],
                                        tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()
    with pytest.raises(SystemExit, match=f"posenc-inspect: error: {damaged} is damaged"):
        inspect_main([str(damaged), "--out", str(tmp_path / "inspect")])
