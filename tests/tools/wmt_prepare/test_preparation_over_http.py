"""Offline tests of the WMT data preparation (fairseq_posenc.wmt, examples/wmt/prepare.py).

Small fake archives with the real layout (fairseq_posenc/wmt/fake_archives.py) are served from a
loopback HTTP server (or a local directory); the whole preparation runs on them, through
sacreBLEU's own download/md5/SGML code and fairseq-preprocess, with injected faults: a
transfer cut half-way (resumed with Range), corrupt and truncated archives (detected and
fetched again), a partial download left by a killed run, a damaged file found on a rerun,
parallel files of different lengths, HTTP 404.

One file of about 550 lines on purpose: every test here shares the module's fake mirror and
loopback server (built once), and splitting them would build those twice.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from fairseq_posenc.wmt import catalog, cli, common, download, fake_archives
from fairseq_posenc.wmt import czeng as wmt_czeng, text as wmt_text  # names of locals here

EUROPARL = "www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"
COMMONCRAWL = "www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"
NC_V10 = "www.statmt.org/wmt15/training-parallel-nc-v10.tgz"
NC_V13 = "data.statmt.org/wmt18/translation-task/training-parallel-nc-v13.tgz"
WMT13_TEST = "statmt.org/wmt13/test.tgz"

SMALL = ["--bpe-size", "50", "--vocab-threshold", "1", "--retry-wait", "0"]


@pytest.fixture(scope="module", autouse=True)
def _loopback_without_proxy():
    mp = pytest.MonkeyPatch()
    for var in ("no_proxy", "NO_PROXY"):
        mp.setenv(var, "127.0.0.1,localhost")
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    return fake_archives.build_fake_mirror(tmp_path_factory.mktemp("mirror"))


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
    assert sidecar == common.sha256_file(archive)
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
    encoded = wmt_text.encode([text], "de", bpe_dir)[0]
    assert "@@" in encoded and f"{wmt_text.JOINER}-" in encoded  # hyphens split off (-a)
    decoded = wmt_text.detokenize([post_process(encoded, "subword_nmt")], "de", "subword-nmt")[0]
    assert decoded == text  # the raw text, quotes included
    assert wmt_text.detokenize(["Ein Test ."], "de", "sentencepiece") == ["Ein Test ."]


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
    with pytest.raises(common.PrepareError, match="data.plaintext-format/..train.gz"):
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


# --------------------------------------------------------------------------------------
# Downloads: resume across runs, corrupt twice, damaged on disk, 404
# --------------------------------------------------------------------------------------


def test_resume_after_killed_run(mirror, tmp_path):
    """A .part left by a killed run is continued with Range; a server that ignores Range
    makes the download start over; a complete .part (416 on resume) is taken as it is."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    shutil.copyfile(mirror / COMMONCRAWL, downloads / (Path(COMMONCRAWL).name + ".part"))
    data = (mirror / NC_V10).read_bytes()
    (downloads / (Path(NC_V10).name + ".part")).write_bytes(data[: len(data) // 3])
    europarl = (mirror / EUROPARL).read_bytes()
    (downloads / (Path(EUROPARL).name + ".part")).write_bytes(europarl[:100])
    with fake_archives.MirrorServer(mirror) as srv:
        srv.faults[EUROPARL] = ["norange"]
        code, log = run(["wmt15_en_de", "--dest", tmp_path / "d", "--download-dir", downloads,
                         "--mirror", srv.url, "--download-only", *SMALL])  # fmt: skip
        requests = list(srv.requests)
    assert code == 0, log
    assert (NC_V10, f"bytes={len(data) // 3}-") in requests
    assert "ignored the range request" in log
    size = (mirror / COMMONCRAWL).stat().st_size
    assert [r for p, r in requests if p == COMMONCRAWL] == [f"bytes={size}-"]
    for rel in (NC_V10, EUROPARL, COMMONCRAWL):
        assert (downloads / Path(rel).name).read_bytes() == (mirror / rel).read_bytes()
    assert not list(downloads.glob("*.part"))


def test_corrupt_twice_and_damaged_on_disk(mirror, tmp_path):
    argv = ["wmt15_en_de", "--dest", tmp_path / "d", "--download-only", *SMALL]
    with fake_archives.MirrorServer(mirror) as srv:
        srv.faults[NC_V10] = ["truncate", "corrupt"]
        code, log = run([*argv, "--mirror", srv.url])
        assert code == 1
        assert "corrupt twice in a row" in log and NC_V10 in log
        assert str(tmp_path / "d" / "downloads" / "training-parallel-nc-v10.tgz") in log
        assert not (tmp_path / "d" / "downloads" / "training-parallel-nc-v10.tgz").exists()

        code, log = run([*argv, "--mirror", srv.url])  # the server is fine again
        assert code == 0, log
        archive = tmp_path / "d" / "downloads" / "training-parallel-nc-v10.tgz"
        damaged = bytearray(archive.read_bytes())
        damaged[len(damaged) // 2] ^= 0xFF
        archive.write_bytes(bytes(damaged))
        srv.requests.clear()
        code, log = run([*argv, "--mirror", srv.url])
        assert code == 0, log
        assert "changed since it was downloaded" in log
        assert [p for p, _ in srv.requests if not p.endswith("SUMS")] == [NC_V10]
    assert archive.read_bytes() == (mirror / NC_V10).read_bytes()


def test_without_mirror_uses_files_put_there_by_hand(mirror, tmp_path):
    """The real code path (no --mirror) with no network: archives downloaded by other means
    are verified and used; sacreBLEU finds its test sets in its cache (here one filled by a
    mirror run) and does not download."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    for rel in (EUROPARL, COMMONCRAWL, NC_V10):
        shutil.copyfile(mirror / rel, downloads / Path(rel).name)
    cache = tmp_path / "sacrebleu-cache"
    code, log = run(["wmt15_en_de", "--dest", tmp_path / "filler", "--mirror", mirror,
                     "--sacrebleu-dir", cache, "--download-only", *SMALL])  # fmt: skip
    assert code == 0, log
    code, log = run(["wmt15_en_de", "--dest", tmp_path / "d", "--download-dir", downloads,
                     "--sacrebleu-dir", cache, "--download-only", *SMALL])  # fmt: skip
    assert code == 0, log
    assert log.count("found without a checksum; verifying it") == 3
    for rel in (EUROPARL, COMMONCRAWL, NC_V10):
        sidecar = downloads / (Path(rel).name + ".sha256")
        assert sidecar.read_text().split()[0] == common.sha256_file(mirror / rel)
    assert count(tmp_path / "d" / "refs" / "newstest2015.de") > 0


def test_http_404_says_what_to_do(mirror, tmp_path):
    with fake_archives.MirrorServer(mirror) as srv:
        srv.faults[EUROPARL] = ["404"]
        code, log = run(["wmt15_en_de", "--dest", tmp_path / "d", "--mirror", srv.url, *SMALL])
    assert code == 1
    assert "HTTP 404" in log and "put it at" in log


# --------------------------------------------------------------------------------------
# Data errors
# --------------------------------------------------------------------------------------


def test_mismatched_line_counts_name_the_files(mirror, tmp_path):
    broken = tmp_path / "mirror"
    shutil.copytree(mirror, broken)
    archives = fake_archives.training_archives()
    members = archives[EUROPARL]
    members["training/europarl-v7.de-en.de"] += "Ein Satz zu viel.\n".encode()
    fake_archives.write_tgz(broken / EUROPARL, members)
    fake_archives.write_checksums(broken)
    code, log = run(["wmt15_en_de", "--dest", tmp_path / "d", "--mirror", broken, *SMALL])
    assert code == 1
    n_en = members["training/europarl-v7.de-en.en"].count(b"\n")
    extracted = tmp_path / "d" / "work" / "extracted" / "europarl_v7" / "training"
    assert f"{extracted / 'europarl-v7.de-en.en'} has {n_en} lines" in log
    assert f"{extracted / 'europarl-v7.de-en.de'} has {n_en + 1} lines" in log
    assert not (tmp_path / "d" / ".stamps" / "extract.europarl_v7.json").exists()


def test_mirror_checksum_mismatch_is_reported(mirror, tmp_path):
    broken = tmp_path / "mirror"
    shutil.copytree(mirror, broken)
    sums = (broken / "SHA256SUMS").read_text()
    nc_sum = next(line.split()[0] for line in sums.splitlines() if NC_V10 in line)
    (broken / "SHA256SUMS").write_text(sums.replace(nc_sum, "0" * 64))
    code, log = run(
        ["wmt15_en_de", "--dest", tmp_path / "d", "--mirror", broken, "--download-only", *SMALL]
    )
    assert code == 1
    assert "differs from the expected" in log and "corrupt twice" in log


def test_command_line_checks(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["wmt18_en_de", "--dest", str(tmp_path), "--czeng", str(tmp_path)])
    assert "--czeng is for wmt18_en_cs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["wmt15_en_de", "--dest", str(tmp_path), "--paracrawl"])
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in catalog.DATASETS)


# --- pinned sizes and hashes of the published archives ----------------------------------


def test_every_training_archive_has_a_pinned_size_and_hash():
    urls = {url for corpus in catalog.CORPORA.values() for url, _ in corpus.files.values()
            if url.startswith("http")}
    assert urls <= set(catalog.PUBLISHED_ARCHIVES)
    for url in urls:
        known = catalog.PUBLISHED_ARCHIVES[url]
        assert known.size > 0 and (known.sha256 or known.sha1), url
    assert catalog.PUBLISHED_ARCHIVES[catalog.COMMONCRAWL].size == 918_311_367
    assert catalog.PUBLISHED_ARCHIVES[catalog.NC_V12].size == 168_591_139
    assert catalog.PUBLISHED_ARCHIVES[catalog.NC_V13].size == 113_157_482


@pytest.mark.parametrize("change", ["size", "content"])
def test_an_archive_that_differs_from_the_published_one_fails_clearly(mirror, tmp_path, change):
    """Downloaded from its official URL (here on loopback), an archive whose size or hash is
    not the published one is an error that says which and what to do; with the pinned
    values it passes."""
    data = (mirror / NC_V10).read_bytes()
    with fake_archives.MirrorServer(mirror) as srv:
        url = f"{srv.url}/{NC_V10}"
        good = catalog.PublishedArchive(size=len(data),
                                        sha256=hashlib.sha256(data).hexdigest())
        bad = (catalog.PublishedArchive(size=len(data) + 1, sha256=good.sha256)
               if change == "size" else
               catalog.PublishedArchive(size=len(data), sha1="0" * 40))
        downloader = download.Downloader(tmp_path / "bad", published={url: bad},
                                         retry_wait=0)
        with pytest.raises(common.PrepareError) as error:
            downloader.fetch(url)
        message = str(error.value)
        assert ("bytes" if change == "size" else "sha1") in message
        assert "published" in message and "--ignore-published-checksums" in message
        path, _ = download.Downloader(tmp_path / "good", published={url: good}).fetch(url)
        assert path.read_bytes() == data


def test_wmt17_takes_rapid_2016_from_wmt17():
    url, member = catalog.CORPORA["rapid_2016"].files["de-en"]
    assert url == "http://data.statmt.org/wmt17/translation-task/rapid2016.tgz"
    assert member == "rapid2016.de-en"
    assert "rapid_2016" in catalog.DATASETS["wmt17_en_de"].corpora


# --- the target side comes back to the raw references it is scored against ---------------

#: Typographic quotes (nested), dashes, an ellipsis, times, numbers, hyphens, an apostrophe.
RAW_REFERENCES = {
    "de": ["„Das ist – wie man sagt – ein „guter“ Anfang…“, sagte er.",
           "Sie sagte: „Wir kommen um 10:30 Uhr an.“",
           "Der Umsatz stieg um 3,5 % auf 1.200 Mio. Euro – nach 2019/20.",
           "Die E-Mail-Adresse (siehe S. 12) ist ‚vertraulich‘… oder?"],
    "cs": ["„To je – jak se říká – dobrý začátek…“, řekl.",
           "Přijedeme v 10:30 hod. – možná později."],
    "en": ["\"It's a 'good' start...\" -- he said; it's 9:45 a.m. (e-mail me).",
           "Well—that’s “fine”, isn’t it?"],
}


def round_trip_bleu(hyps, refs):
    from sacrebleu.metrics import BLEU

    return BLEU().corpus_score(hyps, [refs]).score


@pytest.mark.parametrize("lang", sorted(RAW_REFERENCES))
def test_target_side_round_trip_subword_nmt(lang, tmp_path):
    """Raw references through the preparation's processing and BPE, then back as
    fairseq-generate --remove-bpe and wmt_text.detokenize give them: >= 99 BLEU (here: the
    same strings)."""
    from subword_nmt.apply_bpe import BPE

    refs = RAW_REFERENCES[lang]
    tokens = wmt_text.moses_process_lines(refs, lang)
    corpus = tmp_path / "tok.txt"
    corpus.write_text("\n".join(tokens * 3) + "\n", encoding="utf-8")
    codes, vocab = tmp_path / "codes", tmp_path / "vocab"
    wmt_text.learn_subword_nmt([corpus], codes, [vocab], 40, 1)
    with open(codes, encoding="utf-8") as c:
        bpe = BPE(c)
    encoded = [bpe.process_line(t) for t in tokens]
    assert any("@@ " in line for line in encoded)  # BPE did split words
    removed = [(line + " ").replace("@@ ", "").rstrip() for line in encoded]  # --remove-bpe
    back = wmt_text.detokenize(removed, lang, "subword-nmt",
                               wmt_text.TOKENIZER)
    assert round_trip_bleu(back, refs) >= 99.0
    assert back == refs


@pytest.mark.parametrize("lang", sorted(RAW_REFERENCES))
def test_target_side_round_trip_sentencepiece(lang, tmp_path):
    from fairseq.data.data_utils import post_process

    refs = RAW_REFERENCES[lang]
    text = wmt_text.moses_process_lines(refs, lang, tokenize=False)
    corpus = tmp_path / "raw.txt"
    corpus.write_text("\n".join(text * 3) + "\n", encoding="utf-8")
    model = tmp_path / "spm.model"
    wmt_text.train_sentencepiece([corpus], model, 80, "unigram", 1000, 1)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces = [" ".join(p) for p in sp.encode(text, out_type=str)]
    back = wmt_text.detokenize([post_process(p, "sentencepiece") for p in pieces], lang,
                               "sentencepiece")
    assert round_trip_bleu(back, refs) >= 99.0
    assert back == refs


def test_each_dataset_cleans_as_its_paper(tmp_path):
    """AT5 keeps pairs of at most 120 tokens (and prints the paper's 5,850,267 beside ours);
    tensor2tensor's papers drop only pairs with an empty side; no paper filters by ratio."""
    assert catalog.DATASETS["wmt17_en_de"].cleaning.max_len == 120
    assert catalog.DATASETS["wmt17_en_de"].cleaning.paper_pairs == 5_850_267
    for name in ("wmt15_en_de", "wmt18_en_de", "wmt18_en_cs"):
        c = catalog.DATASETS[name].cleaning
        assert (c.min_len, c.max_len, c.max_ratio) == (1, None, None), name
    pairs = [("a b", "x y"), ("", "x"), ("a", "x " * 121), ("a " * 120, "x"), ("a", "x y z w")]
    ins = [tmp_path / "in.en", tmp_path / "in.de"]
    for i, side in enumerate(zip(*pairs)):
        ins[i].write_text("\n".join(side) + "\n", encoding="utf-8")
    outs = (tmp_path / "out.en", tmp_path / "out.de")
    corpora = [("first", 2), ("second", 3)]
    read, kept, per = wmt_text.clean_corpus(tuple(ins), outs, catalog.AT5_CLEANING, corpora)
    assert (read, kept) == (5, 3)  # the empty side and the 121-token side go
    assert per == {"first": {"raw": 2, "kept": 1}, "second": {"raw": 3, "kept": 2}}
    read, kept, _ = wmt_text.clean_corpus(tuple(ins), outs, catalog.TENSOR2TENSOR_CLEANING)
    assert kept == 4


def test_progress_bars_on_a_terminal_only():
    """Long steps show size, rate and ETA on a terminal; in logs (not a terminal) nothing."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, shown in ((io.StringIO(), False), (Terminal(), True)):
        with common.progress(2048, "download x.tgz", unit="B", unit_scale=True,
                              file=stream) as bar:
            bar.update(1024)
            bar.refresh()
        text = stream.getvalue()
        assert ("download x.tgz" in text and "B/s" in text and "1.0" in text) == shown, text
