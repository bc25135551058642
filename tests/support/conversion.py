"""Checkpoints for the tests of ``posenc-convert`` (tests/plugin/test_convert.py,
tests/tools/test_convert_cli.py, tests/integration/test_convert.py), and what they measure of a
converted one.

Stock checkpoints are written by fairseq's own ``Trainer.save_checkpoint``, as
``fairseq-train`` writes them (:func:`tests.fixtures.make_record_checkpoints.write_checkpoint`,
at the sizes here), or trained by ``fairseq-train`` itself (the integration tests). A
checkpoint of a language model needs fairseq's language-modelling task, and one of an
architecture fairseq does not register (IndicTrans2's ``transformer_18_18``) is a stock one
whose arguments name it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Sequence

import torch

#: A stock transformer at the sizes of the tests: 2+2 layers, 16 wide, 2 heads, 24 positions.
SIZES = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-ffn-embed-dim", "24", "--decoder-ffn-embed-dim", "24",
         "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
         "--encoder-layers", "2", "--decoder-layers", "2",
         "--max-source-positions", "24", "--max-target-positions", "24"]
#: The stock variants the identity tests convert, each with the encoding it has.
VARIANTS = {
    "post-norm": ([], "sinusoidal"),
    "pre-norm-shared": (["--encoder-normalize-before", "--decoder-normalize-before",
                         "--share-all-embeddings", "--layernorm-embedding"], "sinusoidal"),
    "learned-unscaled": (["--encoder-learned-pos", "--decoder-learned-pos",
                          "--no-scale-embedding", "--share-decoder-input-output-embed"],
                         "learned"),
}


def write_stock(path: Path, flags: Sequence[str] = (), arch: str = "transformer",
                sizes: Sequence[str] = SIZES, **saved: Any) -> torch.nn.Module:
    """A stock fairseq transformer saved as ``fairseq-train`` saves it; the model.
    ``saved``: ``write_checkpoint``'s (``updates``; ``data`` and ``langs``: over a binarized
    directory's dictionaries)."""
    from tests.fixtures.make_record_checkpoints import write_checkpoint

    return write_checkpoint(arch, flags, path, sizes=sizes, **saved)


def write_language_model(path: Path) -> None:
    """A tiny ``transformer_lm`` saved by fairseq's trainer with its own task."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.trainer import Trainer

    from fairseq_posenc.plugin.build import toy_dictionary

    args = options.parse_args_and_arch(options.get_training_parser(), [
        "/nonexistent", "--task", "language_modeling", "--arch", "transformer_lm",
        "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--decoder-layers", "1",
        "--decoder-attention-heads", "2", "--cpu", "--optimizer", "adam", "--lr", "0.001",
        "--criterion", "cross_entropy"])
    cfg = convert_namespace_to_omegaconf(args)
    d = toy_dictionary(40)
    task = LanguageModelingTask(cfg.task, d, d)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(str(path), {"train_iterator": {"epoch": 1}})


def renamed(path: Path, out: Path, arch: str) -> Path:
    """A copy of checkpoint ``path`` whose model arguments name ``arch``."""
    from fairseq_posenc.plugin.checkpoint import load

    state = load(path)
    model = copy.deepcopy(state["cfg"]["model"])
    if isinstance(model, dict):
        model["_name"] = arch
    else:
        model.arch = model._name = arch
    state["cfg"]["model"] = model
    torch.save(state, out)
    return out


def validation_nll(data: Path, checkpoint: Path, subset: str = "valid") -> tuple[float, int]:
    """The summed negative log-likelihood of ``subset``'s reference targets under the model
    of ``checkpoint`` (loaded as ``fairseq-generate`` loads it, in eval mode), teacher
    forced, and the number of target tokens: computed here from the model's log-probabilities,
    not by a fairseq criterion."""
    from fairseq import checkpoint_utils

    [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)})
    model.eval()
    task.load_dataset(subset)
    batches = task.get_batch_iterator(dataset=task.dataset(subset), max_sentences=8,
                                      required_batch_size_multiple=1, seed=1)
    total, tokens = 0.0, 0
    pad = task.target_dictionary.pad()
    with torch.no_grad():
        for sample in batches.next_epoch_itr(shuffle=False):
            out = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(out, log_probs=True)
            target = sample["target"]
            picked = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            real = target.ne(pad)
            total -= float(picked[real].double().sum())
            tokens += int(real.sum())
    return total, tokens
