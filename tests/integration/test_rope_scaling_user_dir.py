"""A RoPE scaling of a user's, registered from a ``--user-dir`` file, used through
``fairseq-generate``'s real command line as the built-in ones are
(``tests/integration/test_rope_scaling_cli.py``): a tiny RoPE checkpoint trained without
scaling, translated with ``--rope-scaling power`` (frequencies divided by ``s^p``:
``tests/support/user_scalings.py``). Reference: ``p = 0.5``, ``s = 4`` is position
interpolation by 2, ``--rope-scaling linear --rope-scaling-factor 2``, to the digit; and the
messages of bad flags, derived from the scaling's declaration."""

from __future__ import annotations

import re

import pytest
import torch

import tests.support.cli_utils as cu
from tests.support.user_scalings import write_user_dir

pytestmark = [
    pytest.mark.slow,  # fairseq-train, and fairseq-generate as subprocesses
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

TASK = ["--task", "translation_extrapolation"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("rope_scaling_user_dir")
    cu.create_parallel_corpus(root / "raw", num_train=200, num_test=10)
    cu.preprocess_translation_data(root / "raw", root / "bin")
    write_user_dir(root)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cu.train_translation_model(root / "bin", root / "rope", "transformer_tiny_rope",
                                   max_update=20, extra_flags=["--disable-validation", *TASK])
    finally:
        torch.set_num_threads(saved)
    return root


def generate(root, *flags: str, user_dir: bool = True):
    return cu.run_script("fairseq-generate", [
        *cu.generate_flags(root / "bin", root / "rope" / "checkpoint_last.pt"), *TASK,
        *(["--user-dir", str(root / "myscale")] if user_dir else []), *flags])


def hypotheses(stdout: str) -> list[str]:
    return re.findall(r"^H-\d+\t.*$", stdout, re.MULTILINE)


def test_the_users_scaling_translates_as_its_formula_says(root):
    power = generate(root, "--rope-scaling", "power", "--rope-scaling-factor", "4",
                     "--test-scale-power", "0.5")
    linear = generate(root, "--rope-scaling", "linear", "--rope-scaling-factor", "2")
    plain = generate(root)
    for run in (power, linear, plain):
        assert run.returncode == 0, run.stderr[-2000:]
    assert len(hypotheses(power.stdout)) == 10
    assert hypotheses(power.stdout) == hypotheses(linear.stdout)
    assert hypotheses(power.stdout) != hypotheses(plain.stdout)


@pytest.mark.parametrize("flags,message", [
    (["--rope-scaling", "power", "--rope-scaling-factor", "4", "--test-scale-power", "-1"],
     "--test-scale-power must be at least 0, got -1.0"),
    (["--rope-scaling", "power", "--rope-scaling-factor", "4", "--test-scale-power", "2"],
     "--test-scale-power must be at most 1"),
    (["--rope-scaling", "yarn", "--rope-scaling-factor", "4", "--test-scale-power", "0.25"],
     "--test-scale-power are read by --rope-scaling power only; drop them from "
     "--rope-scaling yarn"),
    (["--rope-scaling", "cubic", "--rope-scaling-factor", "4"],
     "argument --rope-scaling: invalid choice: 'cubic' (choose from 'linear', 'ntk', "
     "'yarn', 'llama3', 'dynamic', 'power')"),
])
def test_bad_flags_stop_the_command_with_a_message_that_names_them(root, flags, message):
    run = generate(root, *flags)
    assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]
    assert "H-" not in run.stdout


def test_without_the_user_dir_the_scaling_is_no_choice(root):
    run = generate(root, "--rope-scaling", "power", "--rope-scaling-factor", "4",
                   user_dir=False)
    assert run.returncode != 0
    assert "invalid choice: 'power' (choose from 'linear', 'ntk', 'yarn', 'llama3', " \
           "'dynamic')" in run.stderr
