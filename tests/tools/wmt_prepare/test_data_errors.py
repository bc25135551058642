"""The WMT preparation's errors in the data (parallel files of different lengths, a
mirror's wrong checksum) and on the command line."""

from __future__ import annotations

import shutil

import pytest

from fairseq_posenc.tools.wmt import catalog, cli, fake_archives
from tests.support.wmt_prepare import EUROPARL, NC_V10, SMALL, run


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
