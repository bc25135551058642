"""``posenc-score``: BLEU, chrF, paired bootstrap and length buckets for translation files.

    posenc-score --ref test.de --src test.en --hyp hyp.de
    posenc-score --ref test.de --src test.en --hyp sinusoidal=a.de --hyp diet_rel=b.de \\
                 --baseline sinusoidal --metric cased --out results/

Hypotheses and references are detokenized text, one sentence per line, in the same order.
Each system gets BLEU and chrF; with ``--baseline`` (or several systems: the first), every
other system gets its difference to the baseline (its score minus the baseline's, so ``+``
is better) and sacreBLEU's paired-bootstrap p-value, for BLEU and for chrF, each marked
``*`` when below :data:`~.significance.ALPHA`; a line under the scores says so. With
``--src``, BLEU and chrF by source length and by reference length, in the test set's own
quantile bins (:func:`.bins.quantile_bins`) or ``--bins``; a bin of fewer than
:data:`~.bins.FEW` sentences is marked few, and no bin carries a significance mark.
``--out DIR`` writes ``scores.json``, ``buckets.md`` and ``buckets.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from .bins import FEW, MAX_BINS, Bins, bin_label, bins_from_edges, moses_lengths, quantile_bins
from .buckets import SHORT_NOTE, BucketScore, bucket_table, by_length, plot_buckets, short
from .scoring import METRICS, score
from .significance import ALPHA, N_RESAMPLES, Comparison, paired_bootstrap

BINS_EXAMPLE = "--bins 5 10 15 20 30"


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file (a leading byte-order mark dropped); a file in another
    encoding stops the command, naming its first line that is not UTF-8."""
    from ..textprep.encoding import check_utf8
    from ..textprep.files import PrepareError

    try:
        check_utf8(path)
        return path.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise SystemExit(f"posenc-score: {path} does not exist") from None
    except PrepareError as e:
        raise SystemExit(f"posenc-score: {e}") from None


def language(path: Path, given: Optional[str], flag: str) -> str:
    """``--src-lang``/``--tgt-lang``, else the file's suffix when it is a language code."""
    if given:
        return given
    suffix = path.suffix.lstrip(".")
    if suffix.isalpha() and len(suffix) == 2:  # ISO 639-1, as sacremoses takes
        return suffix
    raise SystemExit(f"posenc-score: cannot tell the language of {path.name} from its "
                     f"suffix; pass {flag} (e.g. {flag} en)")


def systems(specs: Sequence[str]) -> dict[str, Path]:
    """``NAME=FILE`` (or ``FILE``, named by its file name) for each ``--hyp``."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        name, path = (name, Path(file)) if sep else (Path(spec).name, Path(spec))
        if name in out:
            raise SystemExit(f"posenc-score: two systems named {name!r}; use --hyp NAME=FILE")
        out[name] = path
    return out


def length_bins(values: Optional[Sequence[str]]) -> Optional[Bins]:
    """``--bins`` as bins (None when not given: the test set's own), or the exit that says
    what to pass."""
    if values is None:
        return None
    edges = []
    for value in values:
        try:
            edges.append(int(value))
        except ValueError:
            raise SystemExit(f"posenc-score: --bins {' '.join(values)}: {value!r} is not a "
                             "whole number; give the bins' upper edges in source tokens as "
                             f"ascending positive integers, e.g. {BINS_EXAMPLE}") from None
    try:
        return bins_from_edges(edges)
    except ValueError as err:
        raise SystemExit(f"posenc-score: --bins {' '.join(values)}: {err}") from None


def difference(c: Comparison) -> str:
    """``27.31 (+0.42, p = 0.012*)``: the score, its difference to the baseline and the
    p-value, marked when significant."""
    if c.system == c.baseline:
        return f"{c.system:.2f} (+0.00, same score)"
    return (f"{c.system:.2f} ({c.delta:+.2f}, p = {c.p_value:.3f}"
            f"{'*' if c.significant else ''})")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="posenc-score", description="BLEU, chrF, paired bootstrap and length buckets for "
                                         "translation files.")
    parser.add_argument("--ref", type=Path, required=True, help="references, raw text")
    parser.add_argument("--hyp", action="append", required=True, metavar="[NAME=]FILE",
                        help="detokenized hypotheses of a system (repeat for several)")
    parser.add_argument("--src", type=Path, help="raw source text: enables BLEU and chrF by "
                                                 "source length and by reference length")
    parser.add_argument("--src-lang", help="source language (default: --src's suffix)")
    parser.add_argument("--tgt-lang", help="target language (default: --ref's suffix)")
    parser.add_argument("--metric", choices=METRICS, default="cased",
                        help="BLEU as a paper reports it (default: sacreBLEU's cased 13a)")
    parser.add_argument("--baseline", help="the system the others are tested against "
                                           "(default: the first --hyp)")
    parser.add_argument("--bins", nargs="+", metavar="EDGE",
                        help="with --src: the upper edges of the length bins, in Moses tokens "
                             "of the raw source (and of the raw reference for the bins by "
                             "reference length), as ascending positive integers. "
                             f"{BINS_EXAMPLE} scores (0, 5], (5, 10], (10, 15], (15, 20], "
                             "(20, 30] and (30, inf): a sentence of n tokens falls in the "
                             "bin with low < n <= high, one longer than the last edge in the "
                             "open-ended last bin, which is always shown. Default: the test "
                             f"set's own bins, up to {MAX_BINS} of as equal counts as its "
                             f"lengths allow, each of at least {FEW} sentences (one bin "
                             f"below {2 * FEW} sentences). A bin of fewer than {FEW} "
                             "sentences is marked few; no bin gets a p-value or *")
    parser.add_argument("--out", type=Path, help="write scores.json, buckets.md, buckets.png")
    parser.add_argument("--title", default="BLEU and chrF by source and reference length",
                        help="title of buckets.png (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.bins is not None and args.src is None:
        raise SystemExit("posenc-score: --bins sets the source-length bins, which need the "
                         "raw source text: pass --src FILE too")
    bins = length_bins(args.bins)

    refs = read_lines(args.ref)
    if not refs:
        raise SystemExit(f"posenc-score: {args.ref} has no lines; give the references, one "
                         "sentence per line")
    tgt_lang = language(args.ref, args.tgt_lang, "--tgt-lang")
    hyps = {name: read_lines(path) for name, path in systems(args.hyp).items()}
    for name, lines in hyps.items():
        if len(lines) != len(refs):
            raise SystemExit(f"posenc-score: {name} has {len(lines)} lines for {len(refs)} "
                             f"references in {args.ref}; hypotheses must be one per line, "
                             "in the references' order")
    baseline = args.baseline or next(iter(hyps))
    if baseline not in hyps:
        raise SystemExit(f"posenc-score: --baseline {baseline!r} is none of the systems "
                         f"{', '.join(hyps)}")
    if args.src:  # checked before any scoring
        sources = read_lines(args.src)
        if len(sources) != len(refs):
            raise SystemExit(f"posenc-score: {args.src} has {len(sources)} lines for "
                             f"{len(refs)} references")
        src_lang = language(args.src, args.src_lang, "--src-lang")

    report: dict = {"metric": args.metric, "sentences": len(refs), "baseline": baseline,
                    "systems": {}}
    comparisons: dict[str, tuple[Comparison, Comparison]] = {}
    for name, lines in hyps.items():
        scored = score(lines, refs, args.metric, tgt_lang)
        entry = {"bleu": round(scored.bleu, 2), "chrf": round(scored.chrf, 2),
                 "bleu_signature": scored.bleu_signature,
                 "chrf_signature": scored.chrf_signature}
        if name != baseline:
            b, c = comparisons[name] = paired_bootstrap(hyps[baseline], lines, refs,
                                                        args.metric, tgt_lang)
            # delta: this system's score minus the baseline's (positive: better)
            entry["paired_bootstrap"] = {"resamples": N_RESAMPLES, "bleu_p": b.p_value,
                                         "chrf_p": c.p_value, "bleu_significant": b.significant,
                                         "chrf_significant": c.significant,
                                         "bleu_delta": round(b.delta, 2),
                                         "chrf_delta": round(c.delta, 2), "alpha": ALPHA}
        report["systems"][name] = entry
    by_source: dict[str, list[BucketScore]] = {}
    by_target: dict[str, list[BucketScore]] = {}
    if args.src:
        src_lengths, ref_lengths = moses_lengths(sources, src_lang), moses_lengths(refs, tgt_lang)
        src_bins = bins or quantile_bins(src_lengths)
        ref_bins = bins or quantile_bins(ref_lengths)
        for name, lines in hyps.items():
            by_source[name] = by_length(sources, lines, refs, args.metric, src_lang, tgt_lang,
                                        bins=src_bins, lengths=src_lengths)
            by_target[name] = by_length(sources, lines, refs, args.metric, src_lang, tgt_lang,
                                        bins=ref_bins, lengths=ref_lengths)
            report["systems"][name]["buckets"] = [b.to_json() for b in by_source[name]]
            report["systems"][name]["target_buckets"] = [b.to_json() for b in by_target[name]]
        report["bins_rule"] = "given" if bins else "quantile"
        report["length_bins"] = [bin_label(low, high) for low, high in src_bins]
        report["target_length_bins"] = [bin_label(low, high) for low, high in ref_bins]

    print(f"{len(refs)} sentences, BLEU ({args.metric}) and chrF")
    width = max(len(name) for name in hyps) + 1
    for name, entry in report["systems"].items():
        head = f"  {name + ':':<{width}} "
        if name in comparisons:
            b, c = comparisons[name]
            print(f"{head}BLEU {difference(b)}  chrF {difference(c)}")
        else:
            print(f"{head}BLEU {entry['bleu']:.2f}  chrF {entry['chrf']:.2f}"
                  + ("  (baseline)" if comparisons else ""))
    if comparisons:
        print(f"(+/-) a system's score minus {baseline}'s: + means better than the baseline "
              f"{baseline}; * marks p < {ALPHA} in sacreBLEU's paired bootstrap "
              f"({N_RESAMPLES} resamples) against {baseline}.")
    if by_source:
        tables = (bucket_table(by_source, bins=src_bins) + "\n\n"
                  + bucket_table(by_target, bins=ref_bins, by="reference length",
                                 notes=[SHORT_NOTE] if short(ref_bins) else []))
        print("\nBLEU / chrF by source length and by reference length (Moses tokens):\n"
              + tables)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scores.json").write_text(json.dumps(report, indent=1) + "\n")
        written = [args.out / "scores.json"]
        if by_source:
            (args.out / "buckets.md").write_text(tables + "\n")
            panels = {"by source length": by_source, "by reference length": by_target}
            axis = {"by source length": "source length (Moses tokens)",
                    "by reference length": "reference length (Moses tokens)"}
            written += [args.out / "buckets.md",
                        plot_buckets(panels, args.out / "buckets.png", args.title, axis=axis)]
        print("\nwrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
