"""Fixtures shared by the tools' test modules: the toy corpus, made once per session, and
the comparison killed and resumed that tests/tools/test_compare.py and
tests/tools/test_compare_launch.py both assert on (tests/support/killed_comparison.py:
trained once, it serves both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import killed_comparison as kc


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory) -> Path:
    return kc.make_toy_corpus(tmp_path_factory.mktemp("compare") / "raw")


@pytest.fixture(scope="session")
def killed_comparison(toy_corpus, tmp_path_factory) -> dict:
    """What tests/support/killed_comparison.py's ``run`` records; its OUT as command 5
    left it, for test_compare.py to move."""
    return kc.run(tmp_path_factory.mktemp("killed"), toy_corpus)
