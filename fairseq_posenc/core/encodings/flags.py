"""Command-line flags of the encodings, generated from a small spec per encoding.

Each encoding lists its hyperparameters as :class:`Flag` records
(:attr:`~fairseq_posenc.core.encodings.base.PositionEncoding.flags`); the model's argument
parser and the validation of the values are generated from them. An encoding then maps the
parsed values to its constructor's plain arguments in ``build``. A flag shared by two
encodings (``--tupe-max-len`` for ``tupe_a`` and ``tupe_r``) is listed by both and added once.

Values are checked when the model is built (fairseq parses model flags with
``argument_default=SUPPRESS`` and fills defaults in the architecture function), with a
message that says what to do.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

#: What to do about a flag that has a derived default and was given a bad value.
UNSET_HINT = "Leave it unset for the default."


@dataclass(frozen=True)
class Flag:
    """One ``--option``: a switch (default False, no type or choices) or a value.

    ``minimum``: the smallest value allowed; a flag whose default is None (a value derived
    from the model, e.g. the stack's max positions) is checked only when given.
    ``hint``: what the error message suggests beside the minimum.
    """

    option: str
    help: str
    default: Any = False
    type: Optional[Callable[[str], Any]] = None
    metavar: Optional[str] = None
    choices: Optional[Sequence[str]] = None
    minimum: Optional[int] = None
    hint: str = ""

    @property
    def dest(self) -> str:
        return self.option[2:].replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.default is False and self.type is None and self.choices is None:
            parser.add_argument(self.option, action="store_true", help=self.help)
        else:
            parser.add_argument(self.option, type=self.type, default=self.default,
                                metavar=self.metavar, choices=self.choices, help=self.help)

    def check(self, args: argparse.Namespace) -> None:
        if self.minimum is None:
            return
        value = getattr(args, self.dest)
        if value is None and self.default is None:
            return  # unset: the derived default
        if value is None or int(value) < self.minimum:
            hint = self.hint or (UNSET_HINT if self.default is None else "")
            need = "a positive integer" if self.minimum == 1 else f"at least {self.minimum}"
            raise ValueError(f"{self.option} must be {need}, got {value!r}. {hint}".rstrip())


def add_flags(parser: argparse.ArgumentParser, flags: Sequence[Flag]) -> None:
    """Add each flag the parser does not have yet (shared flags are listed twice)."""
    known = {option for action in parser._actions for option in action.option_strings}
    for flag in flags:
        if flag.option not in known:
            flag.add_to(parser)
            known.add(flag.option)


def check_flags(args: argparse.Namespace, flags: Sequence[Flag]) -> None:
    for flag in flags:
        flag.check(args)


# --- flags that several encodings have, each with its own prefix ------------------------


def max_len_option(encoding: str, what: str) -> Flag:
    """``--<encoding>-max-len N``, defaulting to the stack's --max-source/target-positions."""
    return Flag(f"--{encoding.replace('_', '-')}-max-len",
                f"{encoding}: {what} (default: --max-source-positions / --max-target-positions)",
                default=None, type=int, metavar="N", minimum=1)


def bucket_options(prefix: str, who: str) -> tuple[Flag, Flag]:
    """``--<prefix>-num-buckets`` (default 32) and ``--<prefix>-max-distance`` (128)."""
    flag = prefix.replace("_", "-")
    return (
        Flag(f"--{flag}-num-buckets",
             f"{prefix}: number of relative-position buckets (default 32, {who})",
             default=32, type=int, metavar="N", minimum=4, hint=f"{who} uses 32."),
        Flag(f"--{flag}-max-distance",
             f"{prefix}: distances beyond this share the last bucket (default 128, {who})",
             default=128, type=int, metavar="N", minimum=1, hint=f"{who} uses 128."),
    )


def clip_option(encoding: str) -> Flag:
    """``--<encoding>-clip K`` of Huang et al.'s methods: optional, positive when given."""
    return Flag(f"--{encoding}-clip",
                f"{encoding}: clip relative distances to [-K, K] (default: no clip, a table "
                "entry per distance up to the max positions)",
                default=None, type=int, metavar="K", minimum=1)
