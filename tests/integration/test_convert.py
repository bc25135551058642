"""``posenc-convert`` end to end: stock fairseq transformers trained by ``fairseq-train``
here, converted, translated by ``fairseq-generate`` and fine-tuned by the command it prints.

Each stock variant (post-norm; pre-norm with shared embeddings and a layer norm on them;
learned positions without the embedding scale) is trained once for a few updates on the
synthetic corpus of ``cli_utils``. References:

* a conversion to the encoding the checkpoint has: the stock checkpoint's own
  ``fairseq-generate --beam 10`` output, which the converted one must repeat token for
  token with the same scores, and its validation loss (the targets' log-likelihood summed
  here from each model's log-probabilities), equal to 1e-6; the same for a plugin ``t5``
  checkpoint converted to ``t5``;
* a conversion to another encoding: it loads in ``fairseq-generate`` with no encoding flag
  and translates every test sentence, and the last line it prints, run as a command, fine-
  tunes it (fairseq's log says it loaded the converted model); the new parameters equal
  those of a ``fairseq-train`` run of the printed model flags at learning rate 0, that is
  training's own initialisation.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import shlex
from pathlib import Path

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc.plugin.checkpoint import load
from fairseq_posenc.tools.convert_cli import main as posenc_convert
from tests.support.conversion import VARIANTS, validation_nll

pytestmark = [
    pytest.mark.slow,  # fairseq-train runs: three stock models, fine-tuning, generation
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

NUM_TEST = 27  # not a multiple of 8 (cli_utils.create_parallel_corpus)
#: The stock models' sizes: 2+2 layers, 32 wide, 4 heads.
TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
        "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
        "--decoder-attention-heads", "4"]
#: What the tests add to a printed fine-tuning command: a few updates, where to save.
FINETUNE_RUN = ["--max-update", "2", "--no-progress-bar", "--log-format", "simple",
                "--num-workers", "0", "--no-epoch-checkpoints", "--distributed-world-size", "1",
                "--required-batch-size-multiple", "1"]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    cu.create_parallel_corpus(root / "raw", num_test=NUM_TEST)
    cu.preprocess_translation_data(root / "raw", root / "bin")
    return root / "bin"


@pytest.fixture(scope="module")
def stock(data, tmp_path_factory):
    """``stock(variant)``: the checkpoint of ``fairseq-train --arch transformer`` of that
    variant (trained on first use)."""
    cache: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in cache:
            save_dir = tmp_path_factory.mktemp(f"stock_{variant}")
            cu.train_translation_model(data, save_dir, "transformer", max_update=8,
                                       extra_flags=[*TINY, *VARIANTS[variant][0]])
            cache[variant] = save_dir / "checkpoint_last.pt"
        return cache[variant]

    return get


def converted(source: Path, out: Path, flags: list[str]) -> list[str]:
    """``posenc-convert SOURCE OUT FLAGS``; the lines it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert posenc_convert([str(source), str(out), *flags]) == 0
    return printed.getvalue().splitlines()


def run_command(line: str, save_dir: Path, extra: list[str] = ()) -> None:
    """The printed ``fairseq-train`` command line, in process, with ``extra`` flags."""
    from fairseq import options
    from fairseq_cli import train

    words = shlex.split(line)
    assert words[0] == "fairseq-train"
    args = options.parse_args_and_arch(options.get_training_parser(), [
        *words[1:], *FINETUNE_RUN, "--save-dir", str(save_dir), *extra])
    train.main(args)


@pytest.fixture(scope="module")
def finetuned(stock, tmp_path_factory, data):
    """``finetuned(variant, encoding)``: (the converted checkpoint, its printed command, the
    fine-tuned run's directory and fairseq's log of it)."""
    cache: dict[tuple[str, str], tuple] = {}

    def get(variant: str, encoding: str):
        if (variant, encoding) not in cache:
            root = tmp_path_factory.mktemp(f"finetuned_{variant}_{encoding}")
            lines = converted(stock(variant), root / "converted.pt", ["--pos-encoding", encoding])
            log = io.StringIO()
            handler, fairseq_log = logging.StreamHandler(log), logging.getLogger("fairseq")
            level = fairseq_log.level  # posenc-convert keeps fairseq's notices quiet
            fairseq_log.setLevel(logging.INFO)
            fairseq_log.addHandler(handler)
            try:
                run_command(lines[-1], root / "run")
            finally:
                fairseq_log.removeHandler(handler)
                fairseq_log.setLevel(level)
            cache[variant, encoding] = (root / "converted.pt", lines[-1], root / "run",
                                        log.getvalue())
        return cache[variant, encoding]

    return get


def translations(data: Path, checkpoint: Path) -> list[str]:
    """``fairseq-generate --beam 10``'s hypotheses and scores (its H- and P- lines)."""
    out = cu.generate_main(data, checkpoint)
    return [line for line in out.splitlines() if line[:2] in ("H-", "P-")]


def assert_same_translations_and_loss(data: Path, original: Path, converted_: Path) -> None:
    ours, theirs = translations(data, converted_), translations(data, original)
    assert len([line for line in theirs if line.startswith("H-")]) == NUM_TEST
    assert ours == theirs
    (loss, tokens), (reference, reference_tokens) = (validation_nll(data, converted_),
                                                     validation_nll(data, original))
    assert tokens == reference_tokens > 0
    assert abs(loss / tokens - reference / tokens) < 1e-6


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_conversion_to_the_checkpoints_own_encoding_translates_exactly_as_it(
        variant, stock, data, tmp_path):
    encoding = VARIANTS[variant][1]
    lines = converted(stock(variant), tmp_path / "same.pt", ["--pos-encoding", encoding])
    assert "new 0 tensors" in lines[2] and "dropped 0 tensors" in lines[2]
    assert_same_translations_and_loss(data, stock(variant), tmp_path / "same.pt")


@pytest.mark.parametrize("variant, encoding", [
    ("post-norm", "t5"), ("pre-norm-shared", "rope"), ("learned-unscaled", "alibi")])
def test_a_conversion_to_another_encoding_translates_and_fine_tunes(
        variant, encoding, finetuned, data):
    checkpoint, command, run, log = finetuned(variant, encoding)
    # fairseq-generate rebuilds the model from the checkpoint: no encoding flag
    out = cu.generate_main(data, checkpoint)
    assert sorted(cu.hypotheses(out)) == list(range(NUM_TEST)), out[-2000:]
    # the printed command fine-tuned the converted model: fairseq loaded it, then trained
    assert f"loading pretrained model from {checkpoint}" in log, log[-3000:]
    state = load(run / "checkpoint_last.pt")
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert state["cfg"]["model"].pos_encoding == encoding
    assert f"--finetune-from-model {checkpoint}" in command


def test_a_plugin_checkpoint_converted_to_its_own_encoding_translates_exactly_as_it(
        finetuned, data, tmp_path):
    _, _, run, _ = finetuned("post-norm", "t5")
    lines = converted(run / "checkpoint_last.pt", tmp_path / "same.pt", ["--pos-encoding", "t5"])
    assert "fairseq-posenc's transformer_posenc" in lines[0] and "new 0 tensors" in lines[2]
    assert_same_translations_and_loss(data, run / "checkpoint_last.pt", tmp_path / "same.pt")


def test_new_parameters_are_training_s_own_initialisation(finetuned, tmp_path):
    checkpoint, command, _, _ = finetuned("post-norm", "t5")
    words = shlex.split(command)
    at = words.index("--finetune-from-model")
    fresh = " ".join(shlex.quote(w) for w in words[:at] + words[at + 2:])
    # fairseq-train of the same model from scratch, one update at learning rate 0: its
    # parameters as training initialises them
    run_command(fresh, tmp_path / "fresh", ["--max-update", "1", "--lr", "0",
                                           "--warmup-init-lr", "0"])
    initial, ours = load(tmp_path / "fresh" / "checkpoint_last.pt")["model"], load(checkpoint)
    new = ["encoder.pos_encodings.0.rel_bias", "decoder.pos_encodings.0.rel_bias"]
    assert all(torch.equal(ours["model"][name], initial[name]) for name in new)
    # and the copied ones are not (a check that the comparison can fail)
    assert not torch.equal(ours["model"]["encoder.embed_tokens.weight"],
                           initial["encoder.embed_tokens.weight"])


def test_a_converted_checkpoint_of_another_encoding_is_refused_as_any_other(
        finetuned, data, tmp_path):
    """Conversion is explicit: ``fairseq-train --restore-file`` of a converted checkpoint
    with another encoding is refused as any plugin checkpoint is (test_binaries.py)."""
    checkpoint, _, _, _ = finetuned("pre-norm-shared", "rope")
    with pytest.raises(Exception) as caught:
        cu.train_translation_model(data, tmp_path / "other", "transformer_posenc", max_update=1,
                                   extra_flags=[*TINY, "--pos-encoding", "alibi",
                                                "--restore-file", str(checkpoint)])
    chain, error = [], caught.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("this checkpoint was trained with --pos-encoding rope, but the model being "
               "built uses --pos-encoding alibi" in text for text in chain), chain


def test_the_arguments_record_the_conversion(finetuned):
    checkpoint, _, _, _ = finetuned("learned-unscaled", "alibi")
    model = load(checkpoint)["cfg"]["model"]
    assert model.pos_converted_from["encoding"] == "learned"
    assert model.pos_converted_from["updates"] == 8
    assert argparse.Namespace is type(model)
