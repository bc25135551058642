"""What a preparation promises the recipes, besides ``bin/`` and ``refs/``: ``manifest.json``
(what is where: splits and their test sets, corpora, counts, cleaning, BPE), ``bpe/bpe.json``
(the settings that encode new text as the data was encoded) and ``bpe/README`` (how, in
words). :func:`load_manifest` reads the manifest back.

The layout is the contract described in examples/wmt/README.md ("Output: the contract with
the recipes"); a key added here is added there.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Dict

from ..textprep.files import PrepareError
from ..textprep.text import Cleaning
from ..textprep.text import JOINER, TOKENIZER, subword_settings
from .catalog import DatasetSpec, EvalSet
from .common import Options


def bpe_settings(o: Options) -> dict:
    """The BPE settings a learned model depends on (part of its step's key)."""
    if o.bpe == "subword-nmt":
        return {"bpe": o.bpe, "merges": o.bpe_size, "vocabulary_threshold": o.vocab_threshold}
    return {
        "bpe": o.bpe,
        "vocab_size": o.bpe_size,
        "model_type": o.spm_model_type,
        "sample": o.spm_sample,
    }


def bpe_json(spec: DatasetSpec, o: Options) -> dict:
    """``bpe/bpe.json``: what :func:`fairseq_posenc.tools.textprep.text.encode` needs."""
    return subword_settings(bpe_settings(o), spec.langs)


def bpe_readme(spec: DatasetSpec, o: Options) -> str:
    """``bpe/README``: how to encode new text and decode fairseq's output."""
    if o.bpe == "subword-nmt":
        how = (
            f"Joint BPE (subword-nmt, {o.bpe_size} merges) over sacremoses tokens "
            f"(tokenize -a -x), each token that was attached to the previous one in the raw "
            f"text marked with a leading {JOINER}, so that the tokens join back to exactly "
            "that text. No punctuation normalization.\n"
            "To encode new text in language L (en or {x}) as the training data was, use\n"
            "encode (below). Decode fairseq output with --remove-bpe (or\n"
            "--post-process subword_nmt), then\n"
            "  python examples/wmt/prepare.py detokenize --lang L\n"
        ).replace("{x}", spec.other)
    else:
        how = (
            f"One SentencePiece model ({o.spm_model_type}, vocabulary {o.bpe_size}) for both "
            "languages, over the raw text (whitespace cleaned up; no Moses step, no\n"
            "Unicode normalization: tensor2tensor's subwords are learned on raw text).\n"
            "To encode new text:\n\n"
            "  spm_encode --model spm.model --output_format piece\n\n"
            "(spm_encode: SentencePiece's command-line tools; or encode below).\n"
            "Decode fairseq output with --remove-bpe sentencepiece (or --post-process\n"
            "sentencepiece): that is already detokenized text.\n"
        )
    return (
        f"BPE of {spec.name} (made by examples/wmt/prepare.py; settings in bpe.json)\n\n{how}\n"
        "In Python: encode(lines, lang, this_directory) and\n"
        "detokenize(lines, lang, bpe) (fairseq_posenc.tools.textprep.text) do the same.\n"
    )


def build_manifest(spec: DatasetSpec, o: Options, cleaning: Cleaning, gather: dict,
                   clean: dict, refs: Dict[str, dict], binarized: dict, bpe: dict) -> dict:
    """``manifest.json`` from the stamps of the steps (their ``info``) and ``bpe.json``."""
    import sacrebleu

    sizes = binarized["info"]["sizes"]

    def entry(split: str, e: EvalSet) -> dict:
        info = refs[e.testset]["info"]
        return {
            "split": split,
            "testset": e.testset,
            "sacrebleu": e.sacrebleu,
            "sentences": sizes[split],
            "reverse_identical": info.get("reverse_identical"),
        }

    return {
        "dataset": spec.name,
        "langs": list(spec.langs),
        "directions": [f"en-{spec.other}", f"{spec.other}-en"],
        "bpe": o.bpe,
        "bpe_size": o.bpe_size,
        "remove_bpe": "subword_nmt" if o.bpe == "subword-nmt" else "sentencepiece",
        "detokenize": "joiners" if o.bpe == "subword-nmt" else "none",
        "tokenizer": TOKENIZER if o.bpe == "subword-nmt" else None,
        "valid": entry("valid", spec.valid),
        "tests": [entry("test" if i == 0 else f"test{i}", e) for i, e in enumerate(spec.tests)],
        "train_corpora": list(gather["info"]["pairs"]),
        "train_pairs": {
            "raw": clean["info"]["raw"],
            "clean": clean["info"]["clean"],
            "binarized": sizes["train"],
        },
        "train_pairs_per_corpus": gather["info"]["pairs"],
        "train_pairs_kept_per_corpus": clean["info"].get("per_corpus"),
        "cleaning": {
            **dataclasses.asdict(cleaning),
            "as_the_paper": cleaning == spec.cleaning,
            "applied_to": (
                "Moses tokens" if o.bpe == "subword-nmt" else "whitespace words of the raw text"
            ),
        },
        "bpe_settings": bpe,
        "paper": spec.paper,
        "sacrebleu_version": sacrebleu.__version__,
        "mirror": o.mirror,
        "paths": {"bin": "bin", "refs": "refs", "bpe": "bpe"},
    }


def load_manifest(dest: str | os.PathLike) -> dict:
    """``DEST/manifest.json`` of a finished preparation."""
    path = Path(dest) / "manifest.json"
    if not path.exists():
        raise PrepareError(f"{path} does not exist: run examples/wmt/prepare.py first")
    return json.loads(path.read_text())
