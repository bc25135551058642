"""The rows of a comparison, ``--encodings``: what each trains, and under which label.

    --encodings sinusoidal t5/fox "rope75=rope:--rope-fraction 0.75" "tf=t5/fox:--t5-num-buckets 8"

A row is

* ``ENC``: an encoding, ``--arch PREFIX_ENC`` (the label is the name);
* ``ENCODER/DECODER``: an encoding per stack, ``--arch PREFIX_ENCODER --encoder-pos-encoding
  ENCODER --decoder-pos-encoding DECODER`` (the label is ``ENCODER/DECODER``; its runs'
  directory is ``ENCODER-DECODER``, as no encoding name holds a ``-``);
* ``LABEL=ENC[:FLAGS]``: a labelled row, ``ENC`` an encoding or a pair, trained with
  ``FLAGS`` added, the syntax of ``--variants``. ``FLAGS`` are options of the row's
  encodings only (the plugin's declarations: ``--rope-fraction`` for ``rope``), each
  given once; every other training flag is the same for all rows and goes in
  ``--train-args``. They are read as ``fairseq-train`` reads them, by its parser
  (:func:`check_flags`: ``--rope-fraction -0.1`` is the flag and its value), and their
  values are checked in the row's whole command, its model built
  (:func:`.fairseq_flags.check_train_args`): a value refused there is the row's, named by
  its label.

A :class:`Row` is its label, a ``str``: every record, directory name part, ``--baseline``
and ``--variants`` refers to a row by it, and the runs carry the whole row (a worker or a
SLURM job trains it from the :class:`~.plan.Run` alone). ``OUT/settings.json`` records each
row's definition under its label (:func:`changed`): a rerun that defines a label otherwise
is refused, as it would mix runs of two models under one row.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Optional, Sequence

#: A label: a file name's characters (the runs' directory, the variants' test directories).
_LABEL = re.compile(r"^[A-Za-z0-9_.+-]+$")


class Row(str):
    """A row's label (the ``str``), with ``encoder``, ``decoder`` and ``flags``."""

    encoder: str
    decoder: str
    flags: tuple[str, ...]

    def __new__(cls, label: str, encoder: Optional[str] = None,
                decoder: Optional[str] = None, flags: Sequence[str] = ()) -> "Row":
        row = super().__new__(cls, label)
        row.encoder = encoder or label
        row.decoder = decoder or row.encoder
        row.flags = tuple(flags)
        return row

    def __getnewargs__(self) -> tuple:  # pickled to a worker process or a SLURM job
        return (str(self), self.encoder, self.decoder, self.flags)

    @property
    def label(self) -> str:
        return str(self)

    @property
    def pair(self) -> bool:
        return self.encoder != self.decoder

    @property
    def encodings(self) -> tuple[str, ...]:
        """The row's encodings, each once."""
        return tuple(dict.fromkeys((self.encoder, self.decoder)))

    @property
    def dirname(self) -> str:
        """The runs' directory under ``OUT/runs``: the label, ``/`` as ``-``."""
        return self.label.replace("/", "-")

    def model_flags(self) -> list[str]:
        """What the row's ``fairseq-train`` gets beside ``--arch PREFIX_ENCODER``."""
        stacks = (["--encoder-pos-encoding", self.encoder, "--decoder-pos-encoding",
                   self.decoder] if self.pair else [])
        return [*stacks, *self.flags]

    def written(self) -> str:
        """``ENC:FLAGS`` (``ENC`` an encoding or ``ENCODER/DECODER``), as ``--encodings``
        gives the row after its label."""
        what = f"{self.encoder}/{self.decoder}" if self.pair else self.encoder
        return what + (f":{' '.join(self.flags)}" if self.flags else "")

    def describe(self) -> str:
        """``t5 (encoder) / fox (decoder)``, ``rope --rope-fraction 0.75``: the report's."""
        what = (f"{self.encoder} (encoder) / {self.decoder} (decoder)" if self.pair
                else self.encoder)
        return what + (f", {' '.join(self.flags)}" if self.flags else "")

    def to_json(self) -> dict[str, Any]:
        return {"encoder": self.encoder, "decoder": self.decoder, "flags": list(self.flags)}


def of(value: str) -> Row:
    """``value`` as a row: itself, or a plain name or pair read from a record."""
    if isinstance(value, Row):
        return value
    encoder, _, decoder = value.partition("/")
    return Row(value, encoder, decoder or None)


def split_spec(spec: str, option: str) -> tuple[str, bool, str, bool, tuple[str, ...]]:
    """``[LABEL=]ENC[:FLAGS]``, the syntax of ``--encodings`` and ``--variants``: (label,
    whether ``=`` was given, ENC, whether ``:`` was given, the flags split as a shell
    would); ValueError naming ``option`` for unbalanced quotes."""
    head, colon, flags_text = spec.partition(":")
    label, equals, encoding = head.rpartition("=")
    try:
        flags = tuple(shlex.split(flags_text))
    except ValueError as e:
        raise ValueError(f"{option} {spec!r}: {e}") from None
    return label, bool(equals), encoding, bool(colon), flags


def parse(spec: str) -> Row:
    """One ``--encodings`` value (see the module docstring); ValueError saying what is
    wrong and what to write."""
    label, equals, encoding, colon, flags = split_spec(spec, "--encodings")
    encoder, slash, decoder = encoding.partition("/")
    if (not encoder or (slash and not decoder) or "/" in decoder or (colon and not flags)
            or (colon and not equals)):
        raise ValueError(
            f"--encodings {spec!r} is not ENC, ENCODER/DECODER or LABEL=ENC[:FLAGS] (ENC an "
            "encoding or ENCODER/DECODER), e.g. t5/fox or \"rope75=rope:--rope-fraction "
            "0.75\"")
    if equals and not _LABEL.match(label):
        raise ValueError(f"--encodings {spec!r}: the label {label!r} may hold only letters, "
                         "digits and _ . + - (it names the runs' directory)")
    bare = [f for f in flags if not f.startswith("-")]
    if flags and not flags[0].startswith("-"):
        raise ValueError(f"--encodings {spec!r}: FLAGS start with a flag, got {bare[0]!r}")
    return Row(label or encoding, encoder, decoder or None, flags)


def parse_all(specs: Sequence[str]) -> list[Row]:
    """Every row, in order, a repeated one once; ValueError for a malformed value, a label
    defined twice, or two rows whose runs would share a directory."""
    rows: dict[str, Row] = {}
    for spec in specs:
        row = parse(spec)
        if row in rows and rows[row].to_json() != row.to_json():
            raise ValueError(f"--encodings: the label {row.label} is defined twice "
                             f"({describe_all([rows[row], row])}): give each its own label")
        rows.setdefault(row, row)
    dirs: dict[str, str] = {}
    for row in rows.values():
        if row.dirname in dirs:
            raise ValueError(f"--encodings: {dirs[row.dirname]} and {row.label} would train "
                             f"in the same directory runs/{row.dirname}: label one otherwise")
        dirs[row.dirname] = row.label
    return list(rows.values())


def describe_all(rows: Sequence[Row]) -> str:
    return "; ".join(f"{row.label}: {row.describe()}" for row in rows)


def check(rows: Sequence[Row]) -> None:
    """ValueError where a label is an encoding's name but the row trains something else.
    A row's flags are read with fairseq's parser, and checked by :func:`check_flags`, in
    :func:`.fairseq_flags.check_train_args`, which parses and builds every row's model."""
    from ...core.encodings import ENCODINGS

    for row in rows:
        if row.label in ENCODINGS and row.to_json() != Row(row.label).to_json():
            raise ValueError(f"--encodings {row.label}={row.describe()}: {row.label} is an "
                             "encoding's name, the row that trains it alone: give this row "
                             "a label of its own")


def check_flags(row: Row, flags: Sequence[tuple[str, str]],
                train_args: Sequence[tuple[str, str]]) -> None:
    """ValueError where the row's ``flags`` are not options of its encodings (the plugin's
    declarations), give one twice, or give one that ``train_args`` gives too (which would
    win depends on the order: give it in one place). ``flags`` and ``train_args`` are
    ``(option, dest)`` as fairseq-train's parser reads the row's flags and ``--train-args``
    (:func:`.fairseq_flags.named`: ``--rope-fraction -0.1`` is one option and its value).
    The values are fairseq's and the plugin's to check, in the row's whole command."""
    from ...core.encodings import ENCODINGS
    from ...core.encodings.registry import option_owners

    own = {o.name: o.flag for e in row.encodings for o in ENCODINGS[e].options}
    given = {dest for _, dest in train_args}
    seen: set[str] = set()
    for option, dest in flags:
        where = f"--encodings {row.label}: {option}"
        if dest in given:
            raise ValueError(f"{where} is in --train-args too: give it in one place "
                             "(--train-args: every row)")
        if dest in seen:
            raise ValueError(f"{where} is given twice in the row: give it once "
                             "(fairseq-train reads only the last, and the row's record would "
                             "keep both)")
        seen.add(dest)
        if dest in own:
            continue
        of_others = option_owners().get(dest)
        belongs = f" (an option of {', '.join(of_others)})" if of_others else ""
        raise ValueError(
            f"{where}{belongs} is not an option of {' or '.join(row.encodings)}: a row's "
            f"flags are its encodings' options ({', '.join(sorted(own.values())) or 'none'}); "
            "flags for every row go in --train-args")


def changed(recorded: dict[str, Any], rows: Sequence[Row]) -> list[str]:
    """``LABEL: before, now`` for each row defined otherwise than ``recorded`` (a
    comparison's ``settings.json``) says."""
    lines = []
    for row in rows:
        old = recorded.get(row.label)
        if old is not None and old != row.to_json():
            before = Row(row.label, old["encoder"], old["decoder"], old["flags"])
            lines.append(f"{row.label}: {before.describe()} before, {row.describe()} now")
    return lines
