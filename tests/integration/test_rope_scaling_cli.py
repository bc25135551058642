"""``--rope-scaling`` through ``fairseq-generate``'s real command line: tiny RoPE and xPos
checkpoints trained without scaling (``--task translation_extrapolation --train-max-len
8``) are translated with each scaling from the flags alone. References: the unscaled run's
scores (the scaling changes the model; dynamic NTK only that of sentences longer than the
training length), the papers' frequencies for the model that
fairseq's loading path builds from the same flags, and the messages of bad flags."""

from __future__ import annotations

import math
import re

import pytest
import torch

import tests.support.cli_utils as cu

pytestmark = [
    pytest.mark.slow,  # fairseq-train, and fairseq-generate as subprocesses
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

NUM_TEST = 20
TASK = ["--task", "translation_extrapolation"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("rope_scaling")
    cu.create_parallel_corpus(root / "raw", num_train=200, num_test=NUM_TEST)
    cu.preprocess_translation_data(root / "raw", root / "bin")
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for encoding in ("rope", "xpos"):
            cu.train_translation_model(root / "bin", root / encoding,
                                       f"transformer_tiny_{encoding}", max_update=20,
                                       extra_flags=["--disable-validation", *TASK,
                                                    "--train-max-len", "8"])
    finally:
        torch.set_num_threads(saved)
    return root


#: The decoder's bound per sentence (``max_len + 1``, ``max_len = n_src - 1``): the source's
#: length, so that dynamic NTK leaves sentences within the training length unscaled.
BOUND = ["--max-len-a", "1", "--max-len-b", "-1"]


def generate(root, encoding: str, *flags: str):
    return cu.run_script("fairseq-generate", [
        *cu.generate_flags(root / "bin", root / encoding / "checkpoint_last.pt"), *TASK,
        *BOUND, *flags])


def scores(stdout: str) -> dict[int, float]:
    """``{sentence id: score}`` of the ``H-`` lines."""
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"^H-(\d+)\t(\S+)\t", stdout, re.MULTILINE)}


@pytest.fixture(scope="module")
def unscaled_stdout(root):
    runs = {encoding: generate(root, encoding) for encoding in ("rope", "xpos")}
    for run in runs.values():
        assert run.returncode == 0, run.stderr[-2000:]
    return {encoding: run.stdout for encoding, run in runs.items()}


@pytest.fixture(scope="module")
def unscaled(unscaled_stdout):
    return {encoding: scores(stdout) for encoding, stdout in unscaled_stdout.items()}


@pytest.mark.parametrize("encoding,kind", [("rope", "linear"), ("rope", "ntk"),
                                           ("rope", "yarn"), ("xpos", "yarn")])
def test_a_checkpoint_trained_without_scaling_translates_with_it(root, unscaled, encoding,
                                                                 kind):
    run = generate(root, encoding, "--rope-scaling", kind, "--rope-scaling-factor", "4")
    assert run.returncode == 0, run.stderr[-2000:]
    got = scores(run.stdout)
    assert set(got) == set(unscaled[encoding]) == set(range(NUM_TEST))
    assert any(abs(got[i] - unscaled[encoding][i]) > 1e-3 for i in got)  # a changed model
    if kind == "yarn":  # the training length from the checkpoint's --train-max-len
        assert "--rope-scaling yarn: training length 8, the checkpoint's --train-max-len" \
            in run.stderr


def hypotheses(stdout: str) -> dict[int, tuple[float, str]]:
    """``{sentence id: (score, hypothesis)}`` of the ``H-`` lines."""
    return {int(m.group(1)): (float(m.group(2)), m.group(3))
            for m in re.finditer(r"^H-(\d+)\t(\S+)\t(.*)$", stdout, re.MULTILINE)}


@pytest.mark.parametrize("kind", ["dynamic", "llama3"])
def test_long_inputs_translate_differently_and_dynamic_keeps_short_ones(root, unscaled_stdout,
                                                                       kind):
    """L = 8 tokens with </s>, s = 4. Dynamic NTK rescales a sentence whose bound exceeds
    8 (its source, in the encoder and, with BOUND, in the decoder) and leaves the others
    as trained; Llama 3's scaling is static and may change any sentence."""
    run = generate(root, "rope", "--rope-scaling", kind, "--rope-scaling-factor", "4",
                   "--rope-scaling-original-len", "8")
    assert run.returncode == 0, run.stderr[-2000:]
    bounded = unscaled_stdout["rope"]
    before, after = hypotheses(bounded), hypotheses(run.stdout)
    source_len = {int(m.group(1)): len(m.group(2).split()) + 1
                  for m in re.finditer(r"^S-(\d+)\t(.*)$", bounded, re.MULTILINE)}
    long = [i for i, n in source_len.items() if n > 8]
    short = [i for i, n in source_len.items() if n <= 8]
    assert long and short and set(after) == set(before) == set(range(NUM_TEST))
    assert any(abs(after[i][0] - before[i][0]) > 1e-3 for i in long)
    if kind == "dynamic":
        for i in short:  # the same frequencies, rotated by the per-row product
            assert after[i][1] == before[i][1] and abs(after[i][0] - before[i][0]) < 1e-4
    else:
        assert any(abs(after[i][0] - before[i][0]) > 1e-3 for i in short)


def test_the_model_fairseq_generate_loads_has_the_papers_frequencies(root):
    """fairseq-generate's own steps: its parser, its task, its checkpoint loading."""
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_posenc.core.encodings.rope import Rope

    args = options.parse_args_and_arch(options.get_generation_parser(), [
        *cu.generate_flags(root / "bin", root / "rope" / "checkpoint_last.pt"), *TASK,
        "--rope-scaling", "yarn", "--rope-scaling-factor", "4"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    (model,), _ = checkpoint_utils.load_model_ensemble([cfg.common_eval.path], task=task)
    d = 32  # transformer_tiny's head dimension

    def yarn(i: int) -> float:  # Peng et al.: ramp over r = L / lambda, L = 8, s = 4
        theta = 10000.0 ** (-2 * i / d)
        r = 8 / (2 * math.pi / theta)
        gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
        return (1 - gamma) * theta / 4 + gamma * theta

    ropes = [m for m in model.modules() if isinstance(m, Rope)]
    assert len(ropes) == 2  # one per stack
    for rope in ropes:
        assert max(abs(float(t) - yarn(i)) for i, t in enumerate(rope.theta)) < 1e-15
        assert rope.logit_scale == pytest.approx((0.1 * math.log(4) + 1) ** 2, abs=1e-12)


@pytest.mark.parametrize("flags,message", [
    (["--rope-scaling", "linear", "--rope-scaling-factor", "0.5"],
     "--rope-scaling-factor must be at least 1"),
    (["--rope-scaling-factor", "2"], "--rope-scaling-factor go with --rope-scaling"),
    (["--rope-scaling", "ntk", "--rope-scaling-factor", "2", "--rope-scaling-original-len",
      "8"], "--rope-scaling-original-len is read by --rope-scaling yarn, llama3, dynamic only"),
])
def test_bad_flags_stop_the_command_with_a_message_that_names_them(root, flags, message):
    run = generate(root, "rope", *flags)
    assert run.returncode != 0 and message in run.stderr
    assert "H-" not in run.stdout


def test_fairseq_s_own_translation_task_has_no_such_flag(root):
    """The flags are the plugin's tasks': with fairseq's ``translation`` the parser stops."""
    run = cu.run_script("fairseq-generate", [
        *cu.generate_flags(root / "bin", root / "rope" / "checkpoint_last.pt"),
        "--rope-scaling", "linear", "--rope-scaling-factor", "2"])
    assert run.returncode != 0 and "unrecognized arguments: --rope-scaling" in run.stderr
