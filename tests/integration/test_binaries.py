"""End-to-end tests through fairseq's command-line entry points, for every encoding.

As fairseq's own ``tests/test_binaries.py``: tiny models trained for a few updates on a
small synthetic corpus (``cli_utils.create_parallel_corpus``), by calling the CLI mains
in-process with arguments parsed by ``fairseq.options``; real processes only where one is
needed (two-process training, the installed console scripts, a run without --user-dir).
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc.core.encodings import get_encoding
from tests.support.model_utils import ALL_ENCODINGS as ENCODINGS

# fairseq 0.12 / hydra / torch deprecation noise, not this project's
pytestmark = [
    pytest.mark.slow,  # fairseq-train, -generate and -interactive runs for every encoding
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

NUM_TEST = 27  # not a multiple of 8: fairseq's default batching would drop sentences
TRAIN_UPDATES = 7  # 6 batches per epoch: the run ends (and resumes) mid-epoch 2
SAVE_INTERVAL = 5


@pytest.fixture(scope="module", autouse=True)
def _weights_only_protection_on():
    """Checkpoints must load because of the plugin's allowlist, not an escape hatch."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
        yield


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine two
    threads make a short training run many times slower."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Synthetic corpus, binarized once (fairseq-preprocess, joined dictionary)."""
    root = tmp_path_factory.mktemp("data")
    raw, bin_ = root / "raw", root / "bin"
    sizes = cu.create_parallel_corpus(raw, num_test=NUM_TEST)
    cu.preprocess_translation_data(raw, bin_)
    assert (bin_ / "dict.src.txt").read_text() == (bin_ / "dict.tgt.txt").read_text()
    return argparse.Namespace(raw=raw, bin=bin_, sizes=sizes)


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """``trained(encoding)``: save dir of a tiny model (trained on first use, then reused)."""
    cache: dict[str, Path] = {}

    def get(encoding: str) -> Path:
        if encoding not in cache:
            save_dir = tmp_path_factory.mktemp(f"ckpt_{encoding}")
            cu.train_translation_model(
                data.bin, save_dir, f"transformer_tiny_{encoding}",
                max_update=TRAIN_UPDATES,
                extra_flags=["--save-interval-updates", str(SAVE_INTERVAL)],
            )
            cache[encoding] = save_dir
        return cache[encoding]

    return get


def load_checkpoint_state(path: Path) -> dict:
    """``torch.load(weights_only=True)`` after importing the plugin (as fairseq does)."""
    from fairseq import utils

    utils.import_user_module(argparse.Namespace(user_dir=cu.USER_DIR))
    return torch.load(path, map_location="cpu", weights_only=True)


def num_updates(path: Path) -> int:
    return load_checkpoint_state(path)["optimizer_history"][-1]["num_updates"]


# --- train, generate, interactive, score ----------------------------------------------


def recorded(model_args) -> tuple:
    """The checkpoint's record of its encodings: the model's, the encoder's, the decoder's."""
    return (model_args.pos_encoding, model_args.encoder_pos_encoding,
            model_args.decoder_pos_encoding)


def expected_record(encoding: str) -> tuple:
    """``transformer_tiny_NAME``'s record: NAME in both stacks, or, for an encoding defined
    for causal attention only, a pair with sinusoidal in the encoder."""
    if get_encoding(encoding).causal_only():
        return (None, "sinusoidal", encoding)
    return (encoding, encoding, encoding)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_train_generate_interactive_score(encoding, data, trained, tmp_path):
    save_dir = trained(encoding)
    checkpoint = save_dir / "checkpoint_last.pt"
    assert checkpoint.exists()
    assert (save_dir / f"checkpoint_1_{SAVE_INTERVAL}.pt").exists()
    state = load_checkpoint_state(checkpoint)
    assert state["optimizer_history"][-1]["num_updates"] == TRAIN_UPDATES
    model_args = state["cfg"]["model"]  # args-based model: an argparse.Namespace
    assert model_args.arch == f"transformer_tiny_{encoding}"
    assert recorded(model_args) == expected_record(encoding)

    # fairseq-generate: every test sentence translated (none dropped by batching)
    assert data.sizes["test"] == NUM_TEST and NUM_TEST % 8 != 0
    out = cu.generate_main(data.bin, checkpoint)
    hyps = cu.hypotheses(out, "H")
    assert len(hyps) == NUM_TEST, out[-2000:]
    assert sorted(hyps) == list(range(NUM_TEST))
    assert all(h.split() for h in hyps.values()), "empty hypothesis"

    # fairseq-interactive --input FILE: one hypothesis per input line
    lines = cu.read_lines(data.raw / "test.src")[:5]
    out_i = cu.interactive_main(data.bin, checkpoint, lines, tmp_path)
    hyps_i = cu.hypotheses(out_i, "H")
    assert sorted(hyps_i) == list(range(len(lines))), out_i[-2000:]
    assert [ln.split("\t", 1)[1] for ln in out_i.splitlines() if ln.startswith("S-")] == lines

    # sacreBLEU (Python API) on the detokenized hypotheses against the raw references
    detok = cu.hypotheses(out, "D")
    assert sorted(detok) == list(range(NUM_TEST))
    refs = cu.read_lines(data.raw / "test.tgt")
    result, signature = cu.score_bleu([detok[i] for i in range(NUM_TEST)], refs)
    assert math.isfinite(result.score) and 0.0 <= result.score <= 100.0
    assert signature.startswith("nrefs:1|") and "version:" in signature


def test_default_batching_would_drop_test_sentences(data, trained):
    """Control for the assertion above: with fairseq's default
    --required-batch-size-multiple 8 the last 27 % 8 = 3 test sentences are not translated,
    so a test set of 27 does reveal the drop."""
    out = cu.generate_main(data.bin, trained("t5") / "checkpoint_last.pt",
                           required_batch_size_multiple=None)
    assert len(cu.hypotheses(out, "H")) == NUM_TEST - NUM_TEST % 8


def test_posenc_tiny_with_pos_encoding_flag(data, tmp_path):
    """--arch transformer_posenc_tiny: --pos-encoding chooses; the checkpoint records it."""
    save_dir = tmp_path / "ckpt"
    cu.train_translation_model(data.bin, save_dir, "transformer_posenc_tiny", max_update=2,
                               extra_flags=["--pos-encoding", "diet_rel",
                                            "--diet-rel-sharing", "layer"])
    checkpoint = save_dir / "checkpoint_last.pt"
    model_args = load_checkpoint_state(checkpoint)["cfg"]["model"]
    assert (model_args.arch, model_args.pos_encoding) == ("transformer_posenc_tiny", "diet_rel")
    assert len(cu.hypotheses(cu.generate_main(data.bin, checkpoint))) == NUM_TEST


@pytest.mark.parametrize("encoding", ["learned", "rope", "shaw"])
def test_random_positions_train_and_translate(data, tmp_path, encoding):
    """--random-positions: fairseq-train draws positions (the checkpoint records the
    option), fairseq-generate translates every test sentence at 0..n-1."""
    save_dir = tmp_path / "ckpt"
    cu.train_translation_model(data.bin, save_dir, f"transformer_tiny_{encoding}",
                               max_update=3, extra_flags=["--random-positions", "64"])
    checkpoint = save_dir / "checkpoint_last.pt"
    assert load_checkpoint_state(checkpoint)["cfg"]["model"].random_positions == 64
    assert len(cu.hypotheses(cu.generate_main(data.bin, checkpoint))) == NUM_TEST


# --- resume ---------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_resume(encoding, data, trained, tmp_path, caplog):
    save_dir = tmp_path / "ckpt"
    shutil.copytree(trained(encoding), save_dir)
    before = load_checkpoint_state(save_dir / "checkpoint_last.pt")
    assert before["optimizer_history"][-1]["num_updates"] == TRAIN_UPDATES
    it_before = before["extra_state"]["train_iterator"]
    assert (it_before["epoch"], it_before["iterations_in_epoch"]) == (2, 1)

    caplog.set_level(logging.INFO)
    caplog.set_level(logging.INFO, logger="fairseq")  # whatever another module set it to
    cu.train_translation_model(data.bin, save_dir, f"transformer_tiny_{encoding}",
                               max_update=TRAIN_UPDATES + 3,
                               extra_flags=["--save-interval-updates", str(SAVE_INTERVAL)])
    log = caplog.text
    assert re.search(rf"Loaded checkpoint \S*checkpoint_last\.pt \(epoch 2 @ {TRAIN_UPDATES} "
                     r"updates\)", log), log[-3000:]
    after = load_checkpoint_state(save_dir / "checkpoint_last.pt")
    history = [h["num_updates"] for h in after["optimizer_history"]]
    assert history[-2:] == [TRAIN_UPDATES, TRAIN_UPDATES + 3]
    it_after = after["extra_state"]["train_iterator"]
    assert (it_after["epoch"], it_after["iterations_in_epoch"]) == (2, 4)
    assert (save_dir / f"checkpoint_2_{2 * SAVE_INTERVAL}.pt").exists()
    assert recorded(after["cfg"]["model"]) == expected_record(encoding)


# --- two processes --------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_process_runs(data, tmp_path_factory):
    """Every encoding trained by two processes for 3 updates, then resumed by both to 5
    (rank 1 receives the checkpoint through broadcast_object: that needs the plugin's
    omegaconf allowlist under weights_only=True). Returns (save dirs, per-phase logs)."""
    root = tmp_path_factory.mktemp("two_process")
    save = {enc: root / enc for enc in ENCODINGS}
    logs = []
    for phase, max_update in (("train", 3), ("resume", 5)):
        jobs = [(enc, cu.train_flags(data.bin, save[enc], f"transformer_tiny_{enc}",
                                     max_update)) for enc in ENCODINGS]
        log_dir = root / phase
        log_dir.mkdir()
        logs.append(cu.train_distributed(jobs, log_dir))
    return save, logs


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_two_process_train_and_resume(encoding, two_process_runs):
    save, (trained_logs, resumed_logs) = two_process_runs
    for phase, results in (("train", trained_logs), ("resume", resumed_logs)):
        for rank, (code, jobs) in enumerate(results):
            log = jobs.get(encoding, "")
            assert f"=== DONE {encoding}" in log, (
                f"rank {rank} ({phase}, exit code {code}) did not finish {encoding}:\n"
                f"{log[-4000:] or list(jobs)}")
    assert "training on 2 devices" in trained_logs[0][1][encoding]
    assert re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ 3 updates\)",
                     resumed_logs[0][1][encoding]), resumed_logs[0][1][encoding][-3000:]
    assert num_updates(save[encoding] / "checkpoint_last.pt") == 5


# --- console scripts, and a plugin checkpoint without --user-dir ----------------------


def test_console_generate_needs_user_dir(data, trained):
    checkpoint = trained("t5") / "checkpoint_last.pt"

    # the installed fairseq-generate works with --user-dir ...
    ok = cu.run_script("fairseq-generate", cu.generate_flags(data.bin, checkpoint))
    assert ok.returncode == 0, ok.stderr[-4000:]
    assert len(cu.hypotheses(ok.stdout, "H")) == NUM_TEST

    # ... and fails without it: under torch's weights_only default, fairseq cannot even
    # unpickle the checkpoint (the plugin's allowlist is not loaded)
    bad = cu.run_script("fairseq-generate", cu.generate_flags(data.bin, checkpoint, user_dir=False))
    assert bad.returncode != 0
    assert "Weights only load failed" in bad.stderr
    assert "Unsupported global: GLOBAL argparse.Namespace" in bad.stderr
    assert not cu.hypotheses(bad.stdout, "H")


def test_console_generate_without_user_dir_unsafe_load(data, trained):
    """With the weights_only protection turned off, fairseq fails to find the model and
    reports it with a misleading IndexError (docs/fairseq-notes.md)."""
    checkpoint = trained("t5") / "checkpoint_last.pt"
    bad = cu.run_script("fairseq-generate", cu.generate_flags(data.bin, checkpoint, user_dir=False),
                        env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    assert bad.returncode != 0
    assert "IndexError: Replacement index 1 out of range" in bad.stderr


# --- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["transformer_posenc_tiny", "transformer_tiny_t5"])
def test_unknown_pos_encoding_is_an_argparse_error(arch, data, tmp_path, capsys):
    from fairseq import options

    argv = cu.train_flags(data.bin, tmp_path, arch) + ["--pos-encoding", "foo"]
    with pytest.raises(SystemExit) as excinfo:
        options.parse_args_and_arch(options.get_training_parser(), argv)
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert "argument --pos-encoding: invalid choice: 'foo'" in err
    for name in ENCODINGS:
        assert repr(name) in err


def test_arch_and_pos_encoding_must_agree(data, tmp_path):
    with pytest.raises(ValueError, match=re.escape(
            "--arch transformer_tiny_t5 is the t5 model but --pos-encoding shaw was given")):
        cu.train_translation_model(data.bin, tmp_path, "transformer_tiny_t5", max_update=1,
                                   extra_flags=["--pos-encoding", "shaw"])


@pytest.mark.parametrize("clip", ["0", "-3"])
def test_shaw_clip_must_be_positive(clip, data, tmp_path):
    with pytest.raises(ValueError, match="--shaw-clip must be a positive integer"):
        cu.train_translation_model(data.bin, tmp_path, "transformer_tiny_shaw", max_update=1,
                                   extra_flags=["--shaw-clip", clip])
    assert not (tmp_path / "checkpoint_last.pt").exists()


def test_learned_input_longer_than_max_positions(data, tmp_path):
    save_dir = tmp_path / "ckpt"
    cu.train_translation_model(
        data.bin, save_dir, "transformer_tiny_learned", max_update=2,
        extra_flags=["--max-source-positions", "16", "--max-target-positions", "16",
                     "--skip-invalid-size-inputs-valid-test"],
    )
    checkpoint = save_dir / "checkpoint_last.pt"
    short = "s1 s2 s3"
    long = " ".join(cu.SRC_WORDS[i % len(cu.SRC_WORDS)] for i in range(30))  # 31 with </s>

    # fairseq-interactive checks sizes against model.max_positions() before the model
    # runs: a clear error naming the flag that skips such inputs ...
    with pytest.raises(Exception, match=re.escape(
            "Size of sample #1 is invalid (=(31, 0)) since max_positions=(16, 16), "
            "skip this example with --skip-invalid-size-inputs-valid-test")):
        cu.interactive_main(data.bin, checkpoint, [short, long], tmp_path)
    # ... and with that flag, the long line is skipped (only a warning), never truncated
    out = cu.interactive_main(data.bin, checkpoint, [short, long], tmp_path,
                              extra_flags=["--skip-invalid-size-inputs-valid-test"])
    assert sorted(cu.hypotheses(out, "H")) == [0]

    # a caller that bypasses fairseq's filter (the model itself) gets the plugin's error
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model = models[0].eval()
    src = task.source_dictionary.encode_line(long, add_if_not_exist=False).long()[None, :]
    with pytest.raises(ValueError, match=re.escape(
            "a source sequence has 31 tokens, but --pos-encoding learned has positions "
            "for only 16 (--max-source-positions)")):
        model.encoder(src, src_lengths=torch.tensor([src.size(1)]))
    enc = model.encoder(src[:, -16:], src_lengths=torch.tensor([16]))
    prev = torch.full((1, 20), task.target_dictionary.index("T1"), dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape(
            "a target sequence has 20 tokens, but --pos-encoding learned has positions "
            "for only 16 (--max-target-positions)")):
        model.decoder(prev, encoder_out=enc)


@pytest.mark.parametrize("flag", ["--restore-file", "--finetune-from-model"])
def test_checkpoint_of_another_encoding_is_rejected(flag, data, trained, tmp_path):
    t5_checkpoint = trained("t5") / "checkpoint_last.pt"
    with pytest.raises(Exception) as excinfo:
        cu.train_translation_model(data.bin, tmp_path / "ckpt", "transformer_tiny_diet_rel",
                                   max_update=1, extra_flags=[flag, str(t5_checkpoint)])
    # fairseq's trainer re-raises as "Cannot load model parameters ..."; the plugin's
    # ValueError is the cause and is printed in the traceback
    chain = []
    e: BaseException | None = excinfo.value
    while e is not None:
        chain.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    text = "\n".join(chain)
    assert "was trained with --pos-encoding t5" in text, text
    assert "uses --pos-encoding diet_rel" in text, text
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()
