"""The WMT preparation of en-cs with CzEng (1.7's block list, or 1.6 as tensor2tensor reads
it) over HTTP, and with sentencepiece from a directory mirror (conftest.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from fairseq_posenc.tools.textprep import files as prep_files
from fairseq_posenc.tools.wmt import fake_archives
from fairseq_posenc.tools.wmt import czeng as wmt_czeng  # names of locals here
from tests.support.wmt_prepare import SMALL, check_contract, run

pytestmark = pytest.mark.slow  # whole preparations from the fake archives


# --------------------------------------------------------------------------------------
# en-cs with CzEng, over HTTP; sentencepiece from a directory mirror
# --------------------------------------------------------------------------------------


def test_wmt18_en_cs_with_czeng_and_paracrawl(mirror, tmp_path):
    """CzEng 1.7 is CzEng 1.6's training files less the blocks of UFAL's converter: the
    fake 1.6 export has 12 training pairs in blocks 0-11 and dev/test files; the fake
    converter (fetched from the mirror) drops blocks 3 and 7."""
    czeng = fake_archives.build_fake_czeng(tmp_path / "czeng16", n=12)
    dest = tmp_path / "wmt18_en_cs"
    with fake_archives.MirrorServer(mirror) as srv:
        code, log = run(["wmt18_en_cs", "--dest", dest, "--mirror", srv.url, "--workers", 2,
                         "--czeng", czeng, "--paracrawl", *SMALL])  # fmt: skip
    assert code == 0, log
    manifest = check_contract(
        dest, "wmt18_en_cs", "cs", ["newstest2018", "newstest2015"], "newstest2013"
    )
    assert manifest["train_corpora"] == [
        "europarl_v7", "commoncrawl", "nc_v13", "paracrawl_v1", "czeng_1.7"
    ]
    assert manifest["train_pairs_per_corpus"]["czeng_1.7"] == 12 - 2
    assert "czeng: dropped 2 pairs of 2 CzEng 1.7 blocks" in log
    raw_cs = (dest / "work" / "train.raw.cs").read_text(encoding="utf-8")
    kept, dropped = [], []
    for name in ("00train.gz", "01train.gz"):
        with gzip.open(czeng / "data.plaintext-format" / name, "rt", encoding="utf-8") as f:
            for line in f:
                block = int(line.split("-b")[1].split("-")[0])
                (dropped if block in fake_archives.FAKE_CZENG_BAD_BLOCKS else kept).append(
                    line.split("\t")[2])
    assert all(cs in raw_cs for cs in kept) and not any(cs in raw_cs for cs in dropped)
    assert "Ne." not in raw_cs.split("\n") and "Ani." not in raw_cs.split("\n")  # dev/test
    assert manifest["tests"][1]["sacrebleu"] == "wmt15"


def test_czeng_1_6_as_tensor2tensor_reads_it(mirror, tmp_path):
    """tensor2tensor's translate_encs_wmt32k (Chen 2021a) reads every training file of
    CzEng 1.6, with no 1.7 block list."""
    czeng = fake_archives.build_fake_czeng(tmp_path / "czeng16", n=12)
    dest = tmp_path / "wmt18_en_cs_16"
    code, log = run(["wmt18_en_cs", "--dest", dest, *fake_archives.prepare_flags(mirror),
                     "--workers", 1, "--czeng", czeng, "--czeng-release", "1.6", *SMALL])
    assert code == 0, log
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["train_corpora"][-1] == "czeng_1.6"
    assert manifest["train_pairs_per_corpus"]["czeng_1.6"] == 12


def test_czeng_needs_the_plaintext_training_files(tmp_path, capsys):
    (tmp_path / "czeng" / "other").mkdir(parents=True)
    with pytest.raises(prep_files.PrepareError, match="data.plaintext-format/..train.gz"):
        list(wmt_czeng.iter_czeng(tmp_path / "czeng", set()))


def test_sentencepiece_from_directory_mirror(mirror, tmp_path):
    dest = tmp_path / "wmt15_spm"
    code, log = run(["wmt15_en_de", "--dest", dest, *fake_archives.prepare_flags(mirror),
                     "--workers", 1, "--bpe", "sentencepiece", "--bpe-size", "120"])  # fmt: skip
    assert code == 0, log
    manifest = check_contract(dest, "wmt15_en_de", "de", ["newstest2015"], "newstest2013")
    assert manifest["bpe"] == "sentencepiece" and manifest["remove_bpe"] == "sentencepiece"
    assert (dest / "bpe" / "spm.model").is_file()
    assert "\u2581" in (dest / "work" / "bpe" / "newstest2015.de").read_text(encoding="utf-8")
    assert manifest["train_corpora"] == ["europarl_v7", "commoncrawl", "nc_v10"]
    # sacreBLEU's cache defaults to DEST/sacrebleu in mirror mode (never ~/.sacrebleu)
    assert (dest / "sacrebleu" / "wmt15" / "raw").is_dir()
