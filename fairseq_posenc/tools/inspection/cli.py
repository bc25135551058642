"""``posenc-inspect CHECKPOINT --out DIR``: pictures of what a trained model's position
encoding adds to its attention, an ``index.html`` to read them, and the numbers as JSON.

Decisions: every user error (a missing or foreign checkpoint, a sentence without a
dictionary, a missing BPE file, a preparation that is not the data's, a sentence longer
than the model accepts) ends in a ``SystemExit`` whose message names what to pass;
tracebacks are for bugs. The sentence options follow what a fairseq user already knows:
``--data`` is the data-bin directory given to ``fairseq-train`` / ``fairseq-generate``
(default: the one the checkpoint records, when it exists), ``--bpe-codes`` the subword-nmt
codes given to ``fairseq-interactive --bpe subword_nmt``; ``--bpe-dir`` is the ``bpe/``
directory of this package's preparation tools, found beside ``--data`` when there
(:func:`.sentence.choose`). The sentence is prepared before the position pictures are
computed, so that a refusal comes first. See ``docs/inspect.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from .load import LoadedModel

# torch, fairseq and the modules that use them are imported once the arguments are parsed:
# --help and argparse's refusals start without them


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-inspect",
        description="Plot what the position encoding of a fairseq-posenc checkpoint adds "
        "to its self-attention (biases by distance, positional logits, segment terms) and, "
        "with --sentence, the encoder's attention maps. Writes PNGs, a JSON file of the "
        "plotted values beside each, and index.html.")
    p.add_argument("checkpoint", type=Path, help="checkpoint_best.pt of a model trained "
                   "with --user-dir fairseq_posenc")
    p.add_argument("--out", type=Path, required=True, help="output directory (created)")
    p.add_argument("--user-dir", type=Path, metavar="DIR", help="the fairseq --user-dir the "
                   "model was trained with, for an encoding of your own "
                   "(docs/adding-an-encoding.md)")
    p.add_argument("--max-distance", type=int, default=64, metavar="D",
                   help="plot relative distances -D..D (default 64; at most the model's "
                   "max positions - 1)")
    p.add_argument("--positions", type=int, default=64, metavar="N",
                   help="heatmaps over positions 0..N-1 (default 64; at most what the "
                   "model supports)")
    text = p.add_argument_group("attention maps of one sentence")
    text.add_argument("--sentence", help="a source sentence (raw text unless --tokenized)")
    text.add_argument("--data", type=Path, metavar="DIR", help="the fairseq-preprocess "
                      "output the model was trained on (holds dict.SRC.txt), read with "
                      "--sentence (default: the data directory the checkpoint records, "
                      "when it exists)")
    text.add_argument("--source-lang", metavar="SRC", help="source language (default: the "
                      "checkpoint's); picks dict.SRC.txt and the Moses tokenizer")
    text.add_argument("--bpe-dir", type=Path, metavar="DIR", help="the bpe/ directory of "
                      "posenc-prepare-corpus or posenc-prepare-wmt output: the sentence is "
                      "prepared as the data was (default: DATA/../bpe when it holds "
                      "bpe.json)")
    text.add_argument("--bpe-codes", type=Path, metavar="FILE", help="subword-nmt codes "
                      "the training data was segmented with, for data made elsewhere "
                      "(refused for posenc-prepare-corpus/-wmt data: use --bpe-dir)")
    text.add_argument("--bpe-vocab", type=Path, metavar="FILE", help="subword-nmt "
                      "vocabulary (apply-bpe --vocabulary), if the data used one")
    text.add_argument("--bpe-vocab-threshold", type=int, default=1, metavar="N",
                      help="apply-bpe --vocabulary-threshold (default 1)")
    text.add_argument("--tokenized", action="store_true", help="the sentence is already "
                      "tokenized and BPE'd: split on spaces only")
    return p


def check(args: argparse.Namespace) -> None:
    from .load import fail

    if args.max_distance < 1 or args.positions < 1:
        raise fail("--max-distance and --positions must be at least 1.")
    if args.sentence is not None and not args.sentence.strip():
        raise fail("--sentence is empty.")
    given = [flag for flag, value in (("--tokenized", args.tokenized),
                                      ("--bpe-dir", args.bpe_dir),
                                      ("--bpe-codes", args.bpe_codes)) if value]
    if len(given) > 1:
        raise fail(f"{' and '.join(given)} are two ways to prepare the sentence; pass one: "
                   "--bpe-dir for posenc-prepare-corpus or posenc-prepare-wmt output, "
                   "--bpe-codes for subword-nmt data made elsewhere, --tokenized for a "
                   "sentence prepared already.")
    if args.bpe_vocab is not None and args.bpe_codes is None:
        raise fail("--bpe-vocab goes with --bpe-codes (subword-nmt apply-bpe --vocabulary); "
                   "pass both, or --bpe-dir, which holds its own vocabularies.")


def summary(loaded: LoadedModel) -> list[str]:
    a = loaded.args
    encoder, _, decoder = loaded.encoding.partition("/")
    chosen = (f"--encoder-pos-encoding {encoder} --decoder-pos-encoding {decoder}" if decoder
              else f"--pos-encoding {encoder}")
    lines = [f"architecture {a.arch}, {chosen}"
             + (f", --pos-layers {a.pos_layers}" if getattr(a, "pos_layers", None) else ""),
             f"encoder: {a.encoder_layers} layers, {a.encoder_attention_heads} heads, width "
             f"{a.encoder_embed_dim}, {a.max_source_positions} source positions",
             f"decoder: {a.decoder_layers} layers, {a.decoder_attention_heads} heads, width "
             f"{a.decoder_embed_dim}, {a.max_target_positions} target positions"]
    if getattr(a, "segment_attention", False):
        lines.append(f"--segment-attention with {a.num_segments} segments "
                     f"(separator {a.segment_separator})")
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    check(args)
    if args.user_dir is not None:  # before the checkpoint names its encoding
        from ..experiment.user_dir import load

        try:
            load(args.user_dir)
        except ValueError as error:
            raise SystemExit(f"posenc-inspect: {error}") from None
    import torch

    with torch.no_grad():  # nothing here trains
        return run(args)


def run(args: argparse.Namespace) -> int:
    from . import report, sentence
    from .load import load_model
    from .records import Report
    from .path_sentence import path_picture
    from .term_pictures import Limits, position_pictures

    loaded = load_model(args.checkpoint, args.data if args.sentence else None,
                        args.source_lang, need_dictionary=args.sentence is not None)
    attention = path = None
    if args.sentence is not None:
        assert loaded.source_dictionary is not None and loaded.data is not None
        if loaded.data_recorded:
            print(f"posenc-inspect: --data {loaded.data} (the training data the checkpoint "
                  "records)")
        how = sentence.choose(loaded.data, loaded.source_dictionary, loaded.source_lang,
                              tokenized=args.tokenized, bpe_dir=args.bpe_dir,
                              bpe_codes=args.bpe_codes, bpe_vocab=args.bpe_vocab,
                              vocab_threshold=args.bpe_vocab_threshold)
        if how.note:
            print(how.note)
        segment = getattr(loaded.args, "segment_attention", False) or getattr(
            loaded.args, "segment_embedding", False)
        tokens = sentence.prepare(
            args.sentence, lang=loaded.source_lang, tokenized=how.tokenized,
            bpe_codes=how.bpe_codes, bpe_vocab=how.bpe_vocab, bpe_dir=how.bpe_dir,
            vocab_threshold=how.vocab_threshold,
            separator=loaded.args.segment_separator if segment else None)
        ids = sentence.encode(tokens, loaded.source_dictionary,
                              bpe_given=how != sentence.Preparation())
        attention = sentence.attention_picture(loaded, tokens, ids)
        path = path_picture(loaded, tokens, ids)
    pictures, notes = position_pictures(loaded.model, Limits(args.max_distance,
                                                             args.positions))
    pictures += [p for p in (attention, path) if p is not None]
    index = report.write(Report(str(args.checkpoint), loaded.encoding, summary(loaded),
                                pictures, notes), args.out)
    print(f"posenc-inspect: {len(pictures)} pictures -> {index}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
