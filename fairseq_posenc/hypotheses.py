"""The hypotheses of a ``fairseq-generate`` run, one per test sentence, in the test set's
order: read once here for the demo, the WMT reproduction and the tests.

fairseq-generate prints ``H-<id>\\t<score>\\t<text>`` per sentence in batch order. A sentence
can silently go missing (fairseq's default ``--required-batch-size-multiple 8`` drops a
last, smaller batch; ``--skip-invalid-size-inputs-valid-test`` drops long ones), so
:func:`in_order` insists on every id, except those the caller declares untranslated (a
source the model cannot represent), which get an empty line.

    python -m fairseq_posenc.hypotheses generate.log --expected 300 > hyp.tok.de
    python -m fairseq_posenc.hypotheses generate.log --expected 300 --detokenize DATA/bpe

``--detokenize`` turns the (``--remove-bpe``) hypotheses back into raw text as the data
directory's ``bpe.json`` says (:func:`fairseq_posenc.wmt.text.detokenize`).
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
    ``prefix="D"``)."""
    found: dict[int, str] = {}
    tag = prefix + "-"
    for line in lines:
        if line.startswith(tag):
            head, _score, text = (line.rstrip("\n").split("\t") + [""])[:3]
            found[int(head[len(tag):])] = text
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fairseq_posenc.hypotheses",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("output", type=Path, help="what fairseq-generate printed")
    p.add_argument("--expected", type=int, required=True, help="sentences in the test set")
    p.add_argument("--detokenize", type=Path, metavar="BPE_DIR",
                   help="detokenize as BPE_DIR/bpe.json says (posenc-prepare-corpus or "
                        "posenc-prepare-wmt output)")
    p.add_argument("--lang", help="with --detokenize: the hypotheses' language (default: "
                                  "the last of bpe.json's langs)")
    args = p.parse_args(argv)
    try:
        lines = read(args.output, args.expected)
        if args.detokenize is not None:
            from .wmt.text import detokenize, load_subword_settings
            settings = load_subword_settings(args.detokenize)
            lines = detokenize(lines, args.lang or settings["langs"][-1], settings["bpe"],
                               settings.get("tokenizer"))
    except (MissingHypotheses, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.writelines(line + "\n" for line in lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
