"""Offline tests of the WMT data preparation (fairseq_posenc.tools.wmt, examples/wmt/prepare.py).

Small fake archives with the real layout (fairseq_posenc/tools/wmt/fake_archives.py) are served from a
loopback HTTP server (or a local directory); the whole preparation runs on them, through
sacreBLEU's own download/md5/SGML code and fairseq-preprocess, with injected faults: a
transfer cut half-way (resumed with Range), corrupt and truncated archives (detected and
fetched again), a partial download left by a killed run, a damaged file found on a rerun,
parallel files of different lengths, HTTP 404.

The fake mirror is built once for all the test modules of this folder (a package-scoped
fixture), and the loopback server is reached without a proxy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fairseq_posenc.tools.wmt import fake_archives


@pytest.fixture(scope="package", autouse=True)
def _loopback_without_proxy():
    mp = pytest.MonkeyPatch()
    for var in ("no_proxy", "NO_PROXY"):
        mp.setenv(var, "127.0.0.1,localhost")
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="package")
def mirror(tmp_path_factory) -> Path:
    return fake_archives.build_fake_mirror(tmp_path_factory.mktemp("mirror"))
