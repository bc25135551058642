"""The WMT preparation's tests' shared pieces: the fake archives' paths on the mirror, the
small settings, ``posenc-prepare-wmt`` in-process, and the check of a prepared dataset's
layout (tests/tools/wmt_prepare/)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from fairseq_posenc.tools.wmt import cli


EUROPARL = "www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"
COMMONCRAWL = "www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"
NC_V10 = "www.statmt.org/wmt15/training-parallel-nc-v10.tgz"
NC_V13 = "data.statmt.org/wmt18/translation-task/training-parallel-nc-v13.tgz"
WMT13_TEST = "statmt.org/wmt13/test.tgz"

SMALL = ["--bpe-size", "50", "--vocab-threshold", "1", "--retry-wait", "0"]


def run(argv) -> tuple[int, str]:
    """cli.main in-process; returns (exit code, its log)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, err.getvalue()


def count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def load_split(bin_dir: Path, src: str, tgt: str, split: str):
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask.setup_task(
        TranslationConfig(
            data=str(bin_dir), source_lang=src, target_lang=tgt, dataset_impl="mmap",
            required_seq_len_multiple=1, train_subset="train",
        )  # fmt: skip
    )
    task.load_dataset(split)
    return task, task.dataset(split)


def check_contract(dest: Path, dataset: str, other: str, tests: list[str], valid: str) -> dict:
    """The layout of /work/tmp/wmt_contract.md, loaded by fairseq in both directions."""
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["dataset"] == dataset
    assert manifest["langs"] == ["en", other]
    assert manifest["valid"]["split"] == "valid" and manifest["valid"]["testset"] == valid
    assert [t["testset"] for t in manifest["tests"]] == tests
    splits = ["test"] + [f"test{i}" for i in range(1, len(tests))]
    assert [t["split"] for t in manifest["tests"]] == splits
    assert manifest["train_pairs"]["clean"] <= manifest["train_pairs"]["raw"]
    assert all(t["reverse_identical"] for t in manifest["tests"])
    assert (dest / "bpe" / "README").is_file()
    bin_dir = dest / "bin"
    for entry in [manifest["valid"], *manifest["tests"]]:
        n_refs = count(dest / "refs" / f"{entry['testset']}.en")
        assert n_refs == count(dest / "refs" / f"{entry['testset']}.{other}") == entry["sentences"]
        fwd_task, fwd = load_split(bin_dir, "en", other, entry["split"])
        rev_task, rev = load_split(bin_dir, other, "en", entry["split"])
        assert len(fwd) == len(rev) == n_refs
        # de->en reads the same files with the roles swapped
        en_side = fwd_task.src_dict.string(fwd[0]["source"])
        assert en_side == rev_task.tgt_dict.string(rev[0]["target"])
    _, train = load_split(bin_dir, other, "en", "train")
    assert len(train) == manifest["train_pairs"]["clean"]
    return manifest
