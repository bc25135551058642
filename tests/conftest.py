"""The suite's processes: ``scripts/test.sh`` runs the tests in parallel worker processes
(pytest-xdist), each module's tests in one worker, so that a module's fixtures (a model
trained once for its tests) are made once, and the modules that share a session fixture
in one worker too (:data:`SHARED`).

A worker computes with one CPU thread, as the processes the tests start do
(:func:`tests.support.cli_utils.subprocess_env`): the workers share the cores, and a
thread pool per worker would make them wait for each other.
"""

from __future__ import annotations

import os

import pytest

#: Modules run in the worker of another: tests/tools/test_compare_launch.py asserts on the
#: killed comparison that tests/tools/test_compare.py scores, a session fixture trained once.
SHARED = {"tests/tools/test_compare_launch.py": "tests/tools/test_compare.py"}


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scheduling by scope, a scope being a test's module (:data:`SHARED`'s
    modules one scope)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED.get(module, module)

    return ByModule(config, log)
