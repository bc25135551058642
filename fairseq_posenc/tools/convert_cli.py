"""posenc-convert: a trained fairseq transformer checkpoint with other position encodings,
ready to fine-tune (docs/convert.md).

    posenc-convert IN.pt OUT.pt --pos-encoding rope
    posenc-convert IN.pt OUT.pt --encoder-pos-encoding t5 --decoder-pos-encoding alibi
    posenc-convert IN.pt OUT.pt --pos-encoding t5 --t5-num-buckets 64 --force

``IN`` is a checkpoint of fairseq's ``transformer`` (any of its architectures and flags) or
of the plugin's ``transformer_posenc``; ``OUT`` is a ``transformer_posenc`` checkpoint. The
flags after ``IN OUT`` are ``fairseq-train``'s position flags: the encoding, any option of
it, ``--keep-input-positions``, ``--max-source-positions`` / ``--max-target-positions``.

The conversion is :func:`fairseq_posenc.plugin.convert.convert`, a function of the plugin
that ``posenc-compare`` can call as well; this command checks ``OUT`` before any work, prints
what was copied, new and dropped, writes ``OUT`` atomically and ends with the ``fairseq-train
--finetune-from-model`` command for it. Every refusal is one line, before anything is
written. ``--help`` imports neither torch nor fairseq.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

#: The position flags the parser names for --help, each passed on to the conversion.
_FORWARDED = ("pos_encoding", "encoder_pos_encoding", "decoder_pos_encoding",
              "keep_input_positions", "max_source_positions", "max_target_positions")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-convert", allow_abbrev=False,
        description="Convert a trained checkpoint of fairseq's transformer (or of "
                    "fairseq-posenc) to other position encodings: every tensor the two "
                    "models share is copied, the new encoding's parameters start as training "
                    "would start them, input positions are dropped where the new encoding "
                    "turns them off. Prints what it did and the fairseq-train command that "
                    "fine-tunes OUT.",
        epilog="Any other option is an option of the chosen encodings, as fairseq-train "
               "takes it (for example --t5-num-buckets 64, --rope-base 500000); an option not "
               "given keeps the checkpoint's value where its own encoding has that option, "
               "else its default. Give IN and OUT first. docs/convert.md has the details.")
    p.add_argument("input", metavar="IN",
                   help="the checkpoint to convert (a .pt file that fairseq-train wrote)")
    p.add_argument("out", metavar="OUT",
                   help="the converted checkpoint to write; an existing file is refused "
                        "unless --force")
    p.add_argument("--pos-encoding", metavar="NAME",
                   help="the encoding of both stacks (a --pos-encoding of fairseq-train with "
                        "--user-dir fairseq_posenc: rope, alibi, t5, ...)")
    for stack in ("encoder", "decoder"):
        p.add_argument(f"--{stack}-pos-encoding", metavar="NAME",
                       help=f"the {stack}'s encoding (default: --pos-encoding, else the "
                            f"checkpoint's {stack} encoding)")
    p.add_argument("--keep-input-positions", action="store_true",
                   help="with an attention-level encoding, keep the checkpoint's input "
                        "positions (otherwise dropped, as the plugin drops them)")
    for side in ("source", "target"):
        p.add_argument(f"--max-{side}-positions", type=int, metavar="N",
                       help=f"the longest {side} sequence the converted model takes "
                            "(default: the checkpoint's; a learned table cannot change it)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="new parameters start as fairseq-train --seed S starts them "
                        "(default: the checkpoint's seed)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    return p


def forwarded(known: argparse.Namespace) -> list[str]:
    """The position flags of ``known`` as the conversion takes them."""
    flags: list[str] = []
    for dest in _FORWARDED:
        value, flag = getattr(known, dest), "--" + dest.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value not in (None, False):
            flags += [flag, str(value)]
    return flags


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    given = list(sys.argv[1:] if argv is None else argv)
    known, extra = p.parse_known_args(given)
    # An encoding's option is unknown to this parser (its declarations need torch), so a
    # value of one given before IN and OUT would be read as IN: refuse that order.
    early = [a for a in given[:given.index(known.out)] if a.startswith("-") and a in extra]
    if early:
        p.error(f"give IN and OUT first, then the encodings' options ({' '.join(early)} "
                "came before them): posenc-convert IN OUT --pos-encoding NAME [OPTIONS]")
    fairseq_log = logging.getLogger("fairseq")
    level = fairseq_log.level
    fairseq_log.setLevel(logging.WARNING)  # its import-time notices, not the caller's setting
    try:
        return _convert(known, extra)
    finally:
        fairseq_log.setLevel(level)


def _convert(known: argparse.Namespace, extra: Sequence[str]) -> int:
    """The conversion of the parsed command line, and what it prints."""
    from fairseq_posenc.plugin.convert import ConversionError, check_output, convert, save
    from fairseq_posenc.plugin.model_flags import encoding_flags

    try:
        check_output(known.input, known.out, known.force)
        conversion = convert(known.input, [*forwarded(known), *extra], seed=known.seed)
        save(conversion, known.out, force=known.force)
    except ConversionError as error:
        raise SystemExit(f"posenc-convert: error: {error}") from None
    report = conversion.report
    print(f"posenc-convert: read {known.input}: {report.described} (sha256 "
          f"{report.source['sha256']})")
    print(f"converted to {' '.join(encoding_flags(conversion.args))}; new parameters start "
          f"as fairseq-train --seed {report.seed} starts them")
    for line in report.lines():
        print(f"  {line}")
    print(f"wrote {known.out}: --arch transformer_posenc, its record of its encodings "
          f"({report.encoding}) and of the conversion, no optimizer state")
    print("fine-tune it with (docs/convert.md: the recipe; add --max-update, set --max-tokens "
          "for your GPUs):")
    print(conversion.finetune_command(known.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
