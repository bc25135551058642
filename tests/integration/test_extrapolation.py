"""Length extrapolation (fairseq_posenc/plugin/extrapolation.py): training on short pairs only, and
what a model cannot represent of a test set, through fairseq's real train and generate.

References: the pairs a plain loop over the raw corpus counts as short enough, and the
``H-`` lines fairseq-generate prints."""

from __future__ import annotations

import argparse

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc.plugin.extrapolation import (
    Untranslatable, checkpoint_limits, length_limits, source_sizes)

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The test corpus (3-12 words per sentence, a word a token), binarized."""
    root = tmp_path_factory.mktemp("extrapolation")
    cu.create_parallel_corpus(root / "raw", num_train=200, num_test=40)
    cu.preprocess_translation_data(root / "raw", root / "bin")
    return root


@pytest.fixture(autouse=True)
def _one_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def words(path) -> list[int]:
    return [len(line.split()) for line in cu.read_lines(path)]


def test_train_max_len_keeps_short_training_pairs_only(data):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [
        *cu.train_flags(data / "bin", data / "ckpt", "transformer_tiny_t5"),
        "--task", "translation_extrapolation", "--train-max-len", "8"])
    task = tasks.setup_task(args)
    for split in ("train", "valid"):
        task.load_dataset(split)

    def kept(split: str) -> int:
        batches = task.get_batch_iterator(task.dataset(split), max_tokens=100_000,
                                          max_positions=(1024, 1024)).frozen_batches
        return sum(len(b) for b in batches)

    src, tgt = words(data / "raw" / "train.src"), words(data / "raw" / "train.tgt")
    short = sum(s + 1 <= 8 and t + 1 <= 8 for s, t in zip(src, tgt))  # + </s>
    assert 0 < short < len(src)
    assert kept("train") == short
    assert kept("valid") == len(words(data / "raw" / "valid.src"))  # not filtered


def test_limits_follow_the_tables_a_model_has():
    def limits(encoding: str, **flags):
        return length_limits(argparse.Namespace(pos_encoding=encoding, max_source_positions=100,
                                                max_target_positions=90, **flags))

    assert limits("t5") == limits("alibi") == limits("diet_rel", diet_rel_max_len=8)
    assert limits("t5").source == 100 and limits("t5").target == 90  # relative: fairseq's
    absolute = limits("diet_abs", diet_abs_max_len=10)
    assert (absolute.source, absolute.target) == (10, 10)
    assert absolute.source_flag == absolute.target_flag == "--diet-abs-max-len"
    assert limits("diet_abs", diet_abs_max_len=None).source == 100
    assert limits("learned").source_flag == "--max-source-positions"


def test_sources_beyond_an_absolute_table_are_reported_not_dropped(data, tmp_path):
    """DIET-ABS with 10 positions, trained on pairs of at most 10 tokens (the recipe):
    fairseq-generate with the flags Untranslatable gives translates exactly the sources of
    at most 10 tokens (with </s>), and no output is longer than the decoder's table."""
    cu.train_translation_model(data / "bin", tmp_path, "transformer_tiny_diet_abs",
                               max_update=2, extra_flags=[
                                   "--diet-abs-max-len", "10", "--disable-validation",
                                   "--task", "translation_extrapolation",
                                   "--train-max-len", "10"])
    checkpoint = tmp_path / "checkpoint_last.pt"
    limits = checkpoint_limits(checkpoint)
    assert (limits.source, limits.target, limits.source_flag) == (10, 10, "--diet-abs-max-len")
    lengths = source_sizes(data / "bin", "test", cu.SRC, cu.TGT)
    assert lengths == [n + 1 for n in words(data / "raw" / "test.src")]
    # the other direction reads the same files, named src-tgt (fairseq accepts both)
    assert source_sizes(data / "bin", "test", cu.TGT, cu.SRC) == [
        n + 1 for n in words(data / "raw" / "test.tgt")]
    skip = Untranslatable.of(limits, lengths)
    expected = {i for i, n in enumerate(words(data / "raw" / "test.src")) if n + 1 > 10}
    assert skip.sentences == expected and expected
    assert skip.target_cap == 9
    notes = skip.notes("DIET-ABS")
    assert f"{len(expected)} test sources longer than the 10 positions" in notes[0]
    assert "outputs capped at 9 tokens" in notes[1]
    out = cu.generate_main(data / "bin", checkpoint, extra_flags=skip.generate_flags())
    hyps = cu.hypotheses(out)
    assert set(hyps) == set(range(40)) - expected
    assert max(len(h.split()) for h in hyps.values()) <= 9
    # without the flags, the model refuses the long sources with a message that says why
    with pytest.raises(ValueError, match="has positions for only 10"):
        cu.generate_main(data / "bin", checkpoint)
