"""Inference-time variants: one encoding's checkpoints translated with more
``fairseq-generate`` flags, without retraining, each a row of the report of its own.

    --variants "rope:--rope-scaling yarn --rope-scaling-factor 4"
    --variants "yarn4=rope:--rope-scaling yarn --rope-scaling-factor 4"

A variant is ``[LABEL=]ENCODING:FLAGS``, ``ENCODING`` a row of ``--encodings`` by its
label (:mod:`.encoding_rows`: an encoding, a pair ``ENCODER/DECODER``, a labelled row). Its row is
named ``LABEL``, or without one ``ENCODING+`` and the flags' values joined by ``-``
(``rope+yarn-4`` above; a pair's variant needs a ``LABEL``, as a name holds no ``/``). Every seed's
checkpoint of the encoding translates every test split with the flags added to the
comparison's decoding, through the plugin's task ``translation_extrapolation`` (which
carries ``--rope-scaling`` to the model, :mod:`fairseq_posenc.plugin.translation_scaling`), into
``OUT/runs/ENCODING/seedK/tests/SPLIT@NAME/``; ``result.json`` records the flags, and a
translation whose flags have changed is made again. A variant changes only translation and
the report: adding one to a rerun translates only it.

:func:`check` refuses, before any training: a malformed or duplicate variant, one of an
encoding not compared, flags that ``posenc-compare`` sets itself, training flags of an
encoding (another encoding's get :func:`fairseq_posenc.plugin.position_args.check_foreign_flags`'
message), flags that ``fairseq-generate`` does not take, any other flag than the plugin's
``--rope-scaling`` options (:func:`.fairseq_flags.variant_flags` says why: every row is
decoded and scored alike), and a ``--rope-scaling`` the encoding's checkpoints would
refuse (:mod:`fairseq_posenc.plugin.translation_scaling`'s own checks:
an encoding without a rotation, YaRN, Llama 3's scaling or dynamic NTK without a training
length). The ``--rope-scaling`` options are the plugin task's own, made from the registry of
scalings: ``--rope-scaling NAME`` (``linear``, ``ntk``, ``yarn``, ``llama3``, ``dynamic``
or a ``--user-dir``'s), ``--rope-scaling-factor``, ``--rope-scaling-original-len`` and each
scaling's options (Llama 3's ``--rope-scaling-low-freq-factor`` and
``--rope-scaling-high-freq-factor``).
"""

from __future__ import annotations

import copy
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .data import Corpus
from .execute import evaluate, say
from .fairseq_flags import variant_flags
from .plan import Run, arch, model_flags, user_dir
from .encoding_rows import of, split_spec
from .settings import Settings

#: The task variants translate with.
TASK = "translation_extrapolation"

#: Flags that posenc-compare gives every translation itself.
RESERVED = ("--path", "--gen-subset", "--task", "--results-path", "--source-lang", "-s",
            "--target-lang", "-t", "--user-dir", "--cpu")

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class Variant:
    name: str  # the report's row
    encoding: str
    flags: tuple[str, ...]

    def test_dir(self, split: str) -> str:
        """The directory under a run's ``tests/``."""
        return f"{split}@{self.name}"

    def result(self, run: Run, out: Path, split: str) -> Optional[dict[str, Any]]:
        """The run's ``result.json`` of ``split`` with these flags (None: not yet)."""
        result = run.read_result(out, self.test_dir(split))
        if result is None:
            return None
        return result if tuple(result.get("flags", ())) == self.flags else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "encoding": self.encoding, "flags": list(self.flags)}


def parse(spec: str) -> Variant:
    """``[LABEL=]ENCODING:FLAGS`` (see the module docstring); ValueError saying what is
    wrong."""
    label, _, encoding, colon, flags = split_spec(spec, "--variants")
    if not colon or not encoding or not flags:
        raise ValueError(f"--variants {spec!r} is not [LABEL=]ENCODING:FLAGS, e.g. "
                         "\"rope:--rope-scaling yarn --rope-scaling-factor 4\"")
    values = [f.split("=", 1)[1] if f.startswith("-") else f for f in flags
              if not f.startswith("-") or "=" in f]  # --flag VALUE and --flag=VALUE
    name = label or f"{encoding}+" + "-".join(values or [f.lstrip("-") for f in flags])
    if not _NAME.match(name):
        raise ValueError(f"--variants {spec!r}: the row name {name!r} may hold only letters, "
                         "digits and _ . + -: name it, LABEL=ENCODING:FLAGS")
    return Variant(name, encoding, flags)


def _check_flags(variant: Variant, settings: Settings, row: str) -> None:
    """ValueError where the checkpoints of ``row`` (the variant's) would refuse
    ``variant``'s flags."""
    from ...plugin.build import model_args
    from ...core.encodings import ENCODINGS
    from ...plugin.position_args import check_foreign_flags
    from ...plugin.translation_scaling import requested_scaling, set_on_model_config

    reserved = [f for f in variant.flags if f.split("=")[0] in RESERVED]
    if reserved:
        raise ValueError(f"{', '.join(reserved)}: posenc-compare sets it for every "
                         "translation; a variant adds other flags")
    options = {option.flag for e in ENCODINGS.values() for option in e.options}
    given = [f for f in variant.flags if f.split("=")[0] in options]
    model = model_args(arch(settings, row), model_flags(settings, row))
    if given:
        trained = model_args(arch(settings, row), [*model_flags(settings, row), *variant.flags])
        check_foreign_flags(trained, *(ENCODINGS[e] for e in of(row).encodings))
        plain = of(row).to_json() == {"encoder": row, "decoder": row, "flags": []}
        trained_as = (f"--pos-encoding {row}" if plain
                      else f"the row {row} ({of(row).describe()})")
        raise ValueError(f"{', '.join(given)}: a training flag of {trained_as}, fixed in its "
                         "checkpoints; to compare it, add a labelled row (--encodings "
                         "\"LABEL=ENC:FLAGS\")")
    generation = variant_flags(variant.flags, TASK)
    scaling = requested_scaling(generation)
    if scaling is not None:
        if (scaling.spec.reads_length and scaling.original_len is None
                and not settings.train_max_len):
            raise ValueError(f"--rope-scaling {scaling.kind} needs the training length: add "
                             "--rope-scaling-original-len N to the variant, or train with "
                             "posenc-compare --train-max-len N (the checkpoints record it)")
        model = copy.copy(model)
        model.train_max_len = settings.train_max_len or 0  # what the checkpoints record
        quiet = logging.getLogger(set_on_model_config.__module__)  # its note on YaRN's length
        level = quiet.level
        quiet.setLevel(logging.WARNING)
        try:
            set_on_model_config(scaling, model)
        finally:
            quiet.setLevel(level)


def check(variants: Sequence[Variant], encodings: Sequence[str], settings: Settings) -> None:
    """Stop (SystemExit, naming the variant and what to do) on bad variants; see the module
    docstring."""
    names: set[str] = set()
    for variant in variants:
        where = f"posenc-compare: --variants {variant.name}"
        if variant.name in names or variant.name in encodings:
            raise SystemExit(f"{where}: the name is taken (an encoding or another variant): "
                             "name it, LABEL=ENCODING:FLAGS")
        names.add(variant.name)
        if variant.encoding not in encodings:
            raise SystemExit(f"{where}: {variant.encoding} is not among --encodings "
                             f"{' '.join(encodings)}: add it, or drop the variant")
    rows = {str(row): row for row in encodings}
    for variant in variants:
        try:
            _check_flags(variant, settings, rows[variant.encoding])
        except ValueError as e:
            raise SystemExit(f"posenc-compare: --variants {variant.name}: "
                             f"\"{variant.encoding}:{' '.join(variant.flags)}\" is refused: "
                             f"{e}") from None


def translate_all(settings: Settings, corpus: Corpus, runs: Sequence[Run],
                  variants: Sequence[Variant], out: Path) -> None:
    """Every variant's translation of every test split by every trained run of its
    encoding that it lacks (resumable, as :mod:`.execute`)."""
    for variant in variants:
        for run in runs:
            if run.encoding != variant.encoding or not run.trained(out).exists():
                continue
            checkpoint = run.checkpoint(out)
            for test in corpus.tests:
                if variant.result(run, out, test.name) is not None:
                    continue
                stale = run.result(out, variant.test_dir(test.name))
                if stale.exists():
                    say(f"{variant.name} seed {run.seed}: {test.name}: other flags before, "
                        "translating again")
                    stale.unlink()
                evaluate(corpus, run, test, checkpoint, out, settings.cpu,
                         lambda what, run=run: say(f"{variant.name} seed {run.seed}: {what}"),
                         name=variant.test_dir(test.name), task=TASK, flags=variant.flags,
                         user_dir=user_dir(settings))
