"""The WMT preparation's downloads from the fake mirror (conftest.py): resumed across runs,
corrupt twice, damaged on disk, put there by hand, HTTP 404; and the archives' pinned
sizes and hashes."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from fairseq_posenc.tools.textprep import files as prep_files
from fairseq_posenc.tools.wmt import catalog, download, fake_archives
from tests.support.wmt_prepare import COMMONCRAWL, EUROPARL, NC_V10, SMALL, count, run

pytestmark = pytest.mark.slow  # preparations from the fake archives


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
        assert sidecar.read_text().split()[0] == prep_files.sha256_file(mirror / rel)
    assert count(tmp_path / "d" / "refs" / "newstest2015.de") > 0


def test_http_404_says_what_to_do(mirror, tmp_path):
    with fake_archives.MirrorServer(mirror) as srv:
        srv.faults[EUROPARL] = ["404"]
        code, log = run(["wmt15_en_de", "--dest", tmp_path / "d", "--mirror", srv.url, *SMALL])
    assert code == 1
    assert "HTTP 404" in log and "put it at" in log


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
        with pytest.raises(prep_files.PrepareError) as error:
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
