"""The whole WMT preparation over HTTP from the fake mirror (conftest.py), with faults on
the way: wmt18_en_de with a transfer cut half-way, a corrupt archive and sacreBLEU's test
set cut once; reruns, changed settings, and the prepared BPE's encode/detokenize."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fairseq_posenc.tools.textprep import files as prep_files
from fairseq_posenc.tools.textprep import text as prep_text  # names of locals here
from fairseq_posenc.tools.wmt import fake_archives
from tests.support.wmt_prepare import COMMONCRAWL, EUROPARL, SMALL, WMT13_TEST, check_contract, run

pytestmark = pytest.mark.slow  # whole preparations from the fake archives


# --------------------------------------------------------------------------------------
# Full preparation over HTTP, with faults on the way
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def de18(mirror, tmp_path_factory):
    """wmt18_en_de over HTTP: Europarl is cut half-way once, Common Crawl arrives corrupt
    once, sacreBLEU's wmt13 tarball is cut once."""
    dest = tmp_path_factory.mktemp("wmt18_en_de")
    with fake_archives.MirrorServer(mirror) as srv:
        srv.faults.update({EUROPARL: ["cut"], COMMONCRAWL: ["corrupt"], WMT13_TEST: ["cut"]})
        code, log = run(["wmt18_en_de", "--dest", dest, "--mirror", srv.url, "--workers", 1,
                         *SMALL])  # fmt: skip
        requests = list(srv.requests)
    return {"dest": dest, "code": code, "log": log, "requests": requests, "mirror": mirror}


def test_wmt18_en_de_full_preparation(de18):
    assert de18["code"] == 0, de18["log"]
    manifest = check_contract(de18["dest"], "wmt18_en_de", "de", ["newstest2018"], "newstest2013")
    assert manifest["train_corpora"] == ["europarl_v7", "commoncrawl", "nc_v13"]
    assert manifest["bpe"] == "subword-nmt" and manifest["bpe_size"] == 50
    assert manifest["valid"]["sacrebleu"] == "wmt13"
    assert manifest["tests"][0]["sacrebleu"] == "wmt18"
    # tensor2tensor's cleaning (DIET): only the fakes' pair with empty sides is dropped; the
    # bad-ratio and 260-token pairs, which fairseq's ratio and length filter would drop, and
    # the \r line stay
    assert manifest["train_pairs"]["raw"] - manifest["train_pairs"]["clean"] == 1
    assert manifest["cleaning"]["max_ratio"] is None and manifest["cleaning"]["as_the_paper"]
    per_corpus = manifest["train_pairs_kept_per_corpus"]
    assert {c: n["raw"] - n["kept"] for c, n in per_corpus.items()} == {
        "europarl_v7": 1, "commoncrawl": 0, "nc_v13": 0}  # Europarl has the empty line
    assert sum(n["raw"] for n in per_corpus.values()) == manifest["train_pairs"]["raw"]
    raw_de = (de18["dest"] / "work" / "train.raw.de").read_text(encoding="utf-8")
    assert "Der Preis ist niedrig." in raw_de
    # refs are sacreBLEU's raw text
    assert (de18["dest"] / "refs" / "newstest2018.de").read_text(encoding="utf-8")[0].isupper()


def test_interrupted_transfer_resumes_with_range(de18):
    europarl = [rng for path, rng in de18["requests"] if path == EUROPARL]
    assert europarl[0] is None and europarl[1].startswith("bytes=") and europarl[1] != "bytes=0-"
    assert "resuming" in de18["log"]
    archive = de18["dest"] / "downloads" / Path(EUROPARL).name
    assert archive.read_bytes() == (de18["mirror"] / EUROPARL).read_bytes()
    sidecar = archive.with_name(archive.name + ".sha256").read_text().split()[0]
    assert sidecar == prep_files.sha256_file(archive)
    assert not list((de18["dest"] / "downloads").glob("*.part"))


def test_corrupt_archive_is_detected_and_fetched_again(de18):
    assert [p for p, _ in de18["requests"]].count(COMMONCRAWL) == 2
    line = next(x for x in de18["log"].splitlines() if "corrupt archive" in x)
    assert "training-parallel-commoncrawl.tgz" in line and COMMONCRAWL in line  # file and URL
    # sacreBLEU's own download was cut once: its cache was reset and the set fetched again
    assert [p for p, _ in de18["requests"]].count(WMT13_TEST) == 2
    assert "sacreBLEU could not prepare wmt13" in de18["log"]


def test_rerun_skips_finished_steps(de18):
    dest = de18["dest"]
    stamps = {p.name: p.stat().st_mtime_ns for p in (dest / ".stamps").iterdir()}
    manifest = json.loads((dest / "manifest.json").read_text())
    with fake_archives.MirrorServer(de18["mirror"]) as srv:
        code, log = run(["wmt18_en_de", "--dest", dest, "--mirror", srv.url, "--workers", 1,
                         *SMALL])  # fmt: skip
        assert code == 0, log
        # nothing downloaded again; only the mirror's checksum lists were read
        assert sorted(p for p, _ in srv.requests) == ["MD5SUMS", "SHA256SUMS"]
    assert {p.name: p.stat().st_mtime_ns for p in (dest / ".stamps").iterdir()} == stamps
    rerun_manifest = json.loads((dest / "manifest.json").read_text())
    assert rerun_manifest.pop("mirror") == srv.url
    manifest.pop("mirror")
    assert rerun_manifest == manifest
    steps = ("extract.europarl_v7", "gather", "tokenize.train", "clean", "bpe.learn", "binarize")
    for step in steps:
        assert f"{step}: done, skipping" in log


def test_changed_setting_redoes_only_later_steps(de18, tmp_path):
    dest = tmp_path / "copy"
    shutil.copytree(de18["dest"], dest)
    code, log = run(["wmt18_en_de", "--dest", dest, "--mirror", de18["mirror"], "--workers", 1,
                     *SMALL, "--max-ratio", "5", "--max-len", "250"])  # fmt: skip
    assert code == 0, log
    assert "tokenize.train: done, skipping" in log and "clean: kept" in log
    assert "bpe.learn: subword-nmt" in log
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["cleaning"]["max_ratio"] == 5.0 and manifest["cleaning"]["max_len"] == 250
    assert not manifest["cleaning"]["as_the_paper"]
    assert manifest["train_pairs"]["raw"] - manifest["train_pairs"]["clean"] == 2  # + 260 tokens


def test_detokenize_and_encode(de18):
    from fairseq.data.data_utils import post_process

    bpe_dir = de18["dest"] / "bpe"
    text = 'Das „neue“ E-Mail-System kostet 3,5 Prozent mehr.'
    encoded = prep_text.encode([text], "de", bpe_dir)[0]
    assert "@@" in encoded and f"{prep_text.JOINER}-" in encoded  # hyphens split off (-a)
    decoded = prep_text.detokenize([post_process(encoded, "subword_nmt")], "de", "subword-nmt")[0]
    assert decoded == text  # the raw text, quotes included
    assert prep_text.detokenize(["Ein Test ."], "de", "sentencepiece") == ["Ein Test ."]
