"""The hypotheses of a ``fairseq-generate`` run, one per test sentence, in the test set's
order: read once here for the demo, the WMT reproduction and the tests.

fairseq-generate prints ``H-<id>\\t<score>\\t<text>`` per sentence in batch order; with
``--nbest N`` it prints N of them per sentence, the best first (its sequence generator sorts
each sentence's finished hypotheses by score, descending, and ``generate.py`` prints them in
that order), so the first ``H-`` line of an id is its translation. A sentence
can silently go missing (fairseq's default ``--required-batch-size-multiple 8`` drops a
last, smaller batch; ``--skip-invalid-size-inputs-valid-test`` drops long ones), so
:func:`in_order` insists on every id, except those the caller declares untranslated (a
source the model cannot represent), which get an empty line.

    posenc-hypotheses generate.log --expected 300 > hyp.tok.de
    posenc-hypotheses generate.log --ref test.de --detokenize DATA/bpe > hyp.de
    posenc-score --ref test.de --hyp hyp.de

``--detokenize`` turns the (``--remove-bpe``) hypotheses back into raw text as the data
directory's ``bpe.json`` says (:func:`fairseq_posenc.tools.textprep.text.detokenize`): exactly
for the preparation's joiner-marked tokens, by the Moses detokenizer (lossy) for the plain
Moses tokens of data in an existing model's vocabulary; that is the file ``posenc-score``
reads. ``--ref`` counts the test sentences in the reference file
instead of ``--expected``. ``python -m fairseq_posenc.tools.hypotheses`` is the same command.
The module itself imports only the standard library when it loads (``--detokenize`` imports the
preparation's text module when it runs), so that it adds no start-up time of its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import AbstractSet, Iterable, Mapping, Optional, Sequence


class MissingHypotheses(ValueError):
    """Not every test sentence has its hypothesis."""


def parse(lines: Iterable[str], prefix: str = "H") -> dict[int, str]:
    """``{sentence id: text}`` of the ``H-`` lines (or ``D-``, detokenized, with
    ``prefix="D"``): the first line of each id, its best hypothesis whatever ``--nbest``."""
    found: dict[int, str] = {}
    tag = prefix + "-"
    for line in lines:
        if line.startswith(tag):
            head, _score, text = (line.rstrip("\n").split("\t") + [""])[:3]
            found.setdefault(int(head[len(tag):]), text)
    return found


def in_order(found: Mapping[int, str], expected: int, source: str = "fairseq-generate",
             untranslated: AbstractSet[int] = frozenset()) -> list[str]:
    """The text of sentences ``0 .. expected-1``; ``""`` for the ``untranslated`` ones,
    which must not have one."""
    missing = sorted(set(range(expected)) - set(found) - set(untranslated))
    if missing or len(found) + len(untranslated) != expected:
        raise MissingHypotheses(
            f"{source}: {len(found)} hypotheses for {expected} test sentences "
            f"(missing ids {missing[:10]}...). fairseq dropped sentences: check "
            "--required-batch-size-multiple 1 and --max-source-positions.")
    return [found.get(i, "") for i in range(expected)]


def read(path: Path, expected: int, untranslated: AbstractSet[int] = frozenset()) -> list[str]:
    """:func:`in_order` of the ``H-`` lines of a generate output file."""
    with open(path, encoding="utf-8") as f:
        return in_order(parse(f), expected, str(path), untranslated)


def count_lines(path: Path) -> int:
    """Lines of a text file, as ``wc -l`` counts them (a last line without a newline
    counts too)."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-hypotheses",
        description="Write the hypotheses of a fairseq-generate run to stdout, one line per "
        "test sentence in the test set's order (fairseq prints them in batch order), "
        "detokenized with --detokenize: the file posenc-score reads. Stops with an error "
        "when a sentence has no hypothesis.")
    p.add_argument("output", type=Path, help="what fairseq-generate printed (its H- lines "
                                             "are read)")
    count = p.add_mutually_exclusive_group(required=True)
    count.add_argument("--expected", type=int, metavar="N",
                       help="sentences in the test set: every id 0..N-1 must have its "
                            "hypothesis")
    count.add_argument("--ref", type=Path, metavar="FILE",
                       help="the test set's reference file, one sentence per line: its "
                            "line count is the number of sentences expected")
    p.add_argument("--detokenize", type=Path, metavar="BPE_DIR",
                   help="detokenize as BPE_DIR/bpe.json says (the bpe/ directory of "
                        "posenc-prepare-corpus or posenc-prepare-wmt output): joiner-marked "
                        "tokens exactly; plain Moses tokens (data in an existing model's "
                        "vocabulary) by the Moses detokenizer, which is lossy")
    p.add_argument("--lang", help="with --detokenize: the hypotheses' language (default: "
                                  "the last of bpe.json's langs)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        for path, what in ((args.output, "fairseq-generate output"), (args.ref, "--ref")):
            if path is not None and not path.is_file():
                raise FileNotFoundError(f"{what} {path} does not exist")
        if args.detokenize is not None and not (args.detokenize / "bpe.json").is_file():
            raise FileNotFoundError(
                f"--detokenize {args.detokenize} has no bpe.json; pass the bpe/ directory "
                "of the posenc-prepare-corpus or posenc-prepare-wmt output the model was "
                "trained on")
        if args.ref is not None:  # its lines are counted as UTF-8 text
            from .textprep.encoding import check_utf8
            from .textprep.files import PrepareError
            try:
                check_utf8(args.ref)
            except PrepareError as e:
                raise ValueError(f"--ref {e}") from None
        expected = count_lines(args.ref) if args.ref is not None else args.expected
        if expected < 1:
            given = f"--ref {args.ref} has no line" if args.ref else f"--expected {expected}"
            raise ValueError(f"{given}: pass the number of test sentences (at least 1)")
        lines = read(args.output, expected)
        if args.detokenize is not None:
            from .textprep.text import detokenize, load_subword_settings
            settings = load_subword_settings(args.detokenize)
            lines = detokenize(lines, args.lang or settings["langs"][-1], settings["bpe"],
                               settings.get("tokenizer"))
    except (ValueError, OSError) as e:  # MissingHypotheses is a ValueError
        print(f"posenc-hypotheses: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.writelines(line + "\n" for line in lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
