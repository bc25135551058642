"""Parameter count of an architecture, and what its position encoding adds over
``sinusoidal`` at the same size (the "Parameters, +Delta" columns of DIET's Table 6).

    posenc-params --arch transformer_wmt_en_de_diet_rel [--vocab 32000] [MODEL FLAGS...]
    posenc-params --arch transformer_tiny_sinusoidal --encoder-pos-encoding t5 \
        --decoder-pos-encoding alibi                 # an encoding per stack
    posenc-params --user-dir myenc --arch transformer_tiny_laplace   # an encoding of yours
    python scripts/param_count.py --arch ...     # the same

Builds the model from fairseq's own argument parsing (any model flag applies, e.g.
``--diet-abs-sharing none`` or ``--max-source-positions 256``) with a joined dictionary of
``--vocab`` types, counting shared parameters once. ``--user-dir DIR`` imports a fairseq user
directory first, as ``fairseq-train`` does (:mod:`.experiment.user_dir`), so that the
architectures of its encodings count; an architecture that is not registered stops before
any model is built, with what to give.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Optional, Sequence

# fairseq_posenc.plugin.build (fairseq, torch) is imported when a model is built, not for --help


def count(args: argparse.Namespace, vocab: int) -> int:
    """Parameters of the model ``args`` describe; ``parameters()`` yields shared ones once."""
    from fairseq_posenc.plugin.build import build_from_args, toy_dictionary

    model = build_from_args(args, toy_dictionary(vocab))
    return sum(p.numel() for p in model.parameters())


def counts(arch: str, flags: list[str], vocab: int) -> tuple[int, int]:
    """(parameters of ``arch``, parameters of the same size with ``sinusoidal``)."""
    from fairseq_posenc.core.encodings import ENCODINGS
    from fairseq_posenc.plugin import encoding_record
    from fairseq_posenc.plugin.build import model_args

    args = model_args(arch, flags)
    baseline = copy.deepcopy(args)  # before build_model sets the position flags in place
    baseline.arch = "transformer_posenc"
    encoding_record.write(baseline, dict.fromkeys(encoding_record.STACKS, "sinusoidal"))
    for encoding in ENCODINGS.values():  # the encoding's own flags are not sinusoidal's
        for option in encoding.options:
            setattr(baseline, option.name, option.default)
    return count(args, vocab), count(baseline, vocab)


def check_arch(arch: str, user_dir: Optional[Path]) -> None:
    """A ``SystemExit`` that says what to give where ``arch`` is no ``transformer_posenc``
    architecture (fairseq's would stop with a bare "invalid choice"); for one that is not
    registered at all, without ``--user-dir``, that an encoding of the user's own needs it."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_posenc import register
    from fairseq_posenc.core.encodings import ENCODINGS
    from fairseq_posenc.plugin.models import PosencTransformerModel

    register()  # the architectures of the package's encodings (and of DIR's, imported)
    model = ARCH_MODEL_REGISTRY.get(arch)
    if model is not None and issubclass(model, PosencTransformerModel):
        return
    ours = (f"posenc-params counts transformer_tiny_NAME and transformer_wmt_en_de_NAME (or "
            f"transformer_posenc[_tiny] --pos-encoding NAME), NAME one of "
            f"{', '.join(sorted(ENCODINGS))}")
    if model is not None:
        raise SystemExit(f"posenc-params: error: --arch {arch} is fairseq's "
                         f"{model.__name__}, not a fairseq-posenc architecture; {ours}")
    if user_dir is None:
        raise SystemExit(f"posenc-params: error: --arch {arch} is not a registered "
                         "architecture. For an encoding of your own, add --user-dir DIR (the "
                         f"directory you give fairseq-train); else {ours}")
    raise SystemExit(f"posenc-params: error: --arch {arch} is registered neither by "
                     f"--user-dir {user_dir} nor by fairseq-posenc; {ours}")


def stacks_note(arch: str, flags: list[str]) -> str:
    """`` (encoder t5, decoder alibi)`` where the stacks' encodings differ, else empty."""
    from fairseq_posenc.plugin.build import model_args
    from fairseq_posenc.plugin.position_args import configure_positions

    args = model_args(arch, flags)
    configure_positions(args)
    if args.encoder_pos_encoding == args.decoder_pos_encoding:
        return ""
    return f" (encoder {args.encoder_pos_encoding}, decoder {args.decoder_pos_encoding})"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Parameter count of an architecture, and what its position encoding adds "
                    "over sinusoidal at the same size (the \"Parameters, +Delta\" columns of "
                    "DIET's Table 6).",
        epilog="Every other option is a fairseq-train model flag (e.g. --diet-abs-sharing "
               "none, --max-source-positions 256) and applies to the model counted.")
    parser.add_argument("--arch", required=True,
                        help="a registered architecture, e.g. transformer_wmt_en_de_diet_rel")
    parser.add_argument("--vocab", type=int, default=32000, help="joined dictionary size")
    parser.add_argument("--user-dir", type=Path, metavar="DIR",
                        help="a fairseq --user-dir that registers encodings of your own "
                             "(docs/adding-an-encoding.md): their architectures count")
    known, flags = parser.parse_known_args(argv)
    if known.user_dir is not None:
        from .experiment.user_dir import load

        try:
            known.user_dir = load(known.user_dir)
        except ValueError as error:
            raise SystemExit(f"posenc-params: {error}") from None
    check_arch(known.arch, known.user_dir)
    total, base = counts(known.arch, flags, known.vocab)
    delta = total - base
    print(f"{known.arch}{stacks_note(known.arch, flags)}\tparameters {total:,}\t"
          f"+{delta:,} ({100 * delta / base:+.2f}%) "
          f"over sinusoidal ({base:,}), vocabulary {known.vocab:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
