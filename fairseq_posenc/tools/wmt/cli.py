"""The command line of the WMT preparation: ``posenc-prepare-wmt`` (console script) and
``python examples/wmt/prepare.py`` (a thin entry point), one subcommand per dataset::

    prepare.py DATASET --dest DIR [options]     # prepare a dataset (DATASET -h: options)
    prepare.py --list                           # the datasets, corpora and test sets
    prepare.py detokenize --lang L [--bpe B]    # detokenize stdin to stdout

Exit codes: 0 done, 1 a :class:`~fairseq_posenc.tools.textprep.files.PrepareError` (the log says
what to do), 2 a usage error (argparse's), 130 interrupted (rerun the same command to continue).
Every dataset takes the same options; the ones that only some datasets accept (``--paracrawl``,
``--czeng``) are checked against the dataset, so that the error names it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

from ..textprep.files import PrepareError, default_workers
from ..textprep.text import TOKENIZER, detokenize
from .catalog import DATASETS, DatasetSpec
from .common import Options, log
from .download import normalize_mirror
from .pipeline import Preparation

class HELP(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, but for flags and for options without one
    (their help says what happens then), which would read "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def summary(spec: DatasetSpec) -> str:
    """One line on a dataset: corpora, optional ones, validation and test sets."""
    extra = " [--paracrawl]" if spec.paracrawl else ""
    extra += " [--czeng PATH]" if spec.czeng else ""
    return (f"{', '.join(spec.corpora)}{extra}; valid {spec.valid.testset}; "
            f"tests {', '.join(e.testset for e in spec.tests)}")


def preparation_options() -> argparse.ArgumentParser:
    """The options every dataset subcommand takes (a parent parser)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--dest", type=Path, required=True, help="output directory")
    p.add_argument("--download-dir", type=Path, help="where archives go (default DEST/downloads; "
                   "share one between datasets to download each corpus once)")
    p.add_argument("--mirror", help="fetch every URL from BASE/<host>/<path> (URL or directory; "
                   "SHA256SUMS / MD5SUMS there are used), e.g. the output of "
                   "python -m fairseq_posenc.tools.wmt.fake_archives")
    p.add_argument("--ignore-published-checksums", action="store_true",
                   help="accept a downloaded archive whose size or hash is not the published "
                        "one (then the data may not be the papers')")
    p.add_argument("--sacrebleu-dir", type=Path, help="sacreBLEU's cache ($SACREBLEU); default "
                   "sacreBLEU's own ($SACREBLEU or ~/.sacrebleu), or DEST/sacrebleu with --mirror")
    p.add_argument("--bpe", choices=("subword-nmt", "sentencepiece"), default="subword-nmt",
                   help="how words are split into subwords: joint subword-nmt BPE, or one "
                        "sentencepiece model for both languages")
    p.add_argument("--bpe-size", type=int, default=32000,
                   help="subword-nmt merge operations, or sentencepiece vocabulary size")
    p.add_argument("--vocab-threshold", type=int, default=50,
                   help="subword-nmt apply-bpe --vocabulary-threshold")
    p.add_argument("--spm-model-type", choices=("unigram", "bpe"), default="unigram",
                   help="with --bpe sentencepiece: the model type")
    p.add_argument("--spm-sample", type=int, default=10_000_000,
                   help="sentences sampled to train sentencepiece (0 = all)")
    p.add_argument("--min-len", type=int, help="cleaning: minimum tokens per side (default: "
                   "the dataset's paper's, 1)")
    p.add_argument("--max-len", type=int, help="cleaning: maximum tokens per side (default: "
                   "the paper's: none for tensor2tensor's papers, 120 for AT5)")
    p.add_argument("--max-ratio", type=float, help="cleaning: maximum length ratio (default: "
                   "none, as in every paper; fairseq's recipe uses 1.5)")
    p.add_argument("--paracrawl", action="store_true", help="add ParaCrawl v1 (wmt18_* only)")
    p.add_argument("--czeng", type=Path, help="local CzEng 1.6 plain-text export, the directory "
                   "that holds data.plaintext-format/ (wmt18_en_cs)")
    p.add_argument("--czeng-release", choices=("1.7", "1.6"), default="1.7",
                   help="1.7 (default): WMT18's corpus, CzEng 1.6 less the blocks of UFAL's "
                        "converter; 1.6: all of it, as tensor2tensor's translate_encs_wmt32k "
                        "(Chen 2021a) reads it")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="processes for sacremoses, subword-nmt, sentencepiece, fairseq-preprocess")
    p.add_argument("--retries", type=int, default=3, help="download retries (each resumes)")
    p.add_argument("--retry-wait", type=float, default=5.0,
                   help="seconds before the first retry (doubles each time)")
    p.add_argument("--timeout", type=float, default=60.0, help="network timeout in seconds")
    p.add_argument("--download-only", action="store_true",
                   help="only download (and verify) the archives and the sacreBLEU test sets")
    return p


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Download and prepare a WMT dataset for fairseq (examples/wmt/README.md): "
        "'%(prog)s DATASET --dest DIR [options]'; '%(prog)s DATASET -h' lists the options. "
        "Also: '%(prog)s detokenize --lang L [--bpe B]' detokenizes stdin.",
        formatter_class=HELP,
    )
    p.add_argument("--list", action="store_true", help="list the datasets and exit")
    commands = p.add_subparsers(dest="name", metavar="DATASET", title="datasets (and detokenize)")
    options = preparation_options()
    for name, spec in DATASETS.items():
        sub = commands.add_parser(name, parents=[options], formatter_class=HELP,
                                  help=summary(spec), description=f"{name}: {spec.paper}")
        sub.set_defaults(run=prepare_command, dataset=name, parser=sub)
    sub = commands.add_parser("detokenize", help="detokenize stdin to stdout",
                              description="detokenize stdin to stdout")
    sub.add_argument("--lang", required=True,
                     help="the text's language (the Moses detokenizer's rules)")
    sub.add_argument("--bpe", default="subword-nmt", choices=("subword-nmt", "sentencepiece"),
                     help="how the text was split into subwords, undone first (default: "
                          "subword-nmt)")
    sub.add_argument("--sacremoses", action="store_true",
                     help="a dataset prepared before joiners (its manifest has no tokenizer): "
                          "detokenize with sacremoses")
    sub.set_defaults(run=detokenize_command)
    return p


def options_from_args(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> Tuple[DatasetSpec, Options]:
    """The dataset and resolved :class:`Options` of a dataset subcommand; ``parser.error``
    (exit code 2) on settings that do not fit together or the dataset."""
    spec = DATASETS[args.dataset]
    if args.paracrawl and not spec.paracrawl:
        parser.error(f"--paracrawl is for wmt18_en_de and wmt18_en_cs, not {spec.name}")
    if args.czeng is not None:
        if not spec.czeng:
            parser.error(f"--czeng is for wmt18_en_cs, not {spec.name}")
        if not args.czeng.exists():
            parser.error(f"--czeng {args.czeng}: no such file or directory")
    min_len = args.min_len if args.min_len is not None else spec.cleaning.min_len
    max_len = args.max_len if args.max_len is not None else spec.cleaning.max_len
    if (min_len < 1 or (max_len is not None and max_len < min_len)
            or (args.max_ratio is not None and args.max_ratio < 1)):
        parser.error("need 1 <= --min-len <= --max-len and --max-ratio >= 1")
    if args.bpe_size < 1 or args.workers < 1:
        parser.error("--bpe-size and --workers must be positive")
    dest = args.dest.expanduser().resolve()
    mirror = normalize_mirror(args.mirror) if args.mirror else None
    if args.sacrebleu_dir:
        sb = args.sacrebleu_dir.expanduser().resolve()
    elif mirror:
        sb = dest / "sacrebleu"  # fake test sets never enter the user's sacreBLEU cache
    else:
        sb = Path(os.environ.get("SACREBLEU", Path.home() / ".sacrebleu")).expanduser()
    as_given = ("bpe", "bpe_size", "vocab_threshold", "spm_model_type", "spm_sample",
                "min_len", "max_len", "max_ratio", "paracrawl", "czeng_release", "workers",
                "retries", "retry_wait", "timeout", "download_only")
    opts = Options(
        dest=dest,
        download_dir=(args.download_dir or dest / "downloads").expanduser().resolve(),
        mirror=mirror,
        sacrebleu_dir=sb,
        czeng=args.czeng.expanduser().resolve() if args.czeng else None,
        check_published=not args.ignore_published_checksums,
        **{name: getattr(args, name) for name in as_given},
    )
    return spec, opts


def prepare_command(args: argparse.Namespace) -> int:
    spec, opts = options_from_args(args, args.parser)
    try:
        Preparation(spec, opts).run()
    except PrepareError as e:
        log(f"ERROR: {e}")
        return 1
    except KeyboardInterrupt:
        log(
            "interrupted; rerun the same command to continue "
            "(finished steps and partial downloads are kept)"
        )
        return 130
    return 0


def detokenize_command(args: argparse.Namespace) -> int:
    lines = [line.rstrip("\n") for line in sys.stdin]
    for line in detokenize(lines, args.lang, args.bpe, None if args.sacremoses else TOKENIZER):
        print(line)
    return 0


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.list:
        for name, spec in DATASETS.items():
            print(f"{name}: {summary(spec)}. {spec.paper}")
        return 0
    if args.name is None:
        parser.error("give a dataset (one of: " + ", ".join(sorted(DATASETS)) + ") or --list")
    return args.run(args)
