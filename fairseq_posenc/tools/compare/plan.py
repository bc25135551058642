"""The runs of a comparison, where each keeps its files, and what each trains with.

A run is one row (:mod:`.encoding_rows`: an encoding, a pair, or a labelled row with its encoding's
options) and one seed. Runs are ordered seed by seed (every row's first seed, then every
row's second, ...), so an interrupted comparison has results for every row as early as it
can. Every run's ``fairseq-train`` gets the same flags
(:meth:`.settings.Settings.fairseq_train_flags`): only the architecture's encoding, the
row's own flags (:meth:`.encoding_rows.Row.model_flags`) and the seed differ, and seed ``k`` is
the same for every row. Under ``--init-from`` every row trains the checkpoint's model with
its own encoding, fine-tuned from the checkpoint converted to it (:mod:`.init_from`). How a
run validates, saves and stops is :mod:`.stopping`'s. The batch is ``--batch-tokens`` per
update, split over the GPUs the launcher gives a run (:func:`batch`), so that it is the same
on any.

``OUT/runs/ROW/seedK/`` (a pair's ``ENCODER-DECODER``): ``checkpoints/`` (fairseq's save
directory), ``init.pt`` (``--init-from``'s checkpoint converted for the run), ``train.log``
(and ``train.N.log`` for the parts before a resume), ``trained.json`` once training has
finished, ``tests/SPLIT/`` (fairseq-generate's output and log, the detokenized hypotheses,
``result.json``) and, for seed 1, ``inspect/`` (``posenc-inspect``'s pictures); ``budgetU/``
keeps those of an earlier ``--max-update U`` (:mod:`.budget`). The records keep paths
inside ``OUT`` relative to it (:func:`stored`), so a copied or moved ``OUT`` works.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..experiment import trainlog
from ..experiment import user_dir as user_dirs
from ..experiment.fairseq_run import USER_DIR
from ..launch.batch import Split, split
from . import init_from, stopping
from .data import Corpus
from .encoding_rows import Row, of
from .settings import Settings


@dataclass(frozen=True)
class Run:
    encoding: str  # the row's label: a plain name, or a :class:`.encoding_rows.Row`
    seed: int

    @property
    def row(self) -> Row:
        return of(self.encoding)

    def dir(self, out: Path) -> Path:
        return out / "runs" / self.row.dirname / f"seed{self.seed}"

    def save_dir(self, out: Path) -> Path:
        return self.dir(out) / "checkpoints"

    def train_log(self, out: Path) -> Path:
        return self.dir(out) / "train.log"

    def train_logs(self, out: Path) -> list[Path]:
        """Every part of the training log, oldest first."""
        return trainlog.parts(self.train_log(out))

    def trained(self, out: Path) -> Path:
        return self.dir(out) / "trained.json"

    def test_dir(self, out: Path, split: str) -> Path:
        return self.dir(out) / "tests" / split

    def result(self, out: Path, split: str) -> Path:
        return self.test_dir(out, split) / "result.json"

    def inspect_dir(self, out: Path) -> Path:
        return self.dir(out) / "inspect"

    def init_checkpoint(self, out: Path) -> Path:
        """``--init-from``'s checkpoint converted to the row's encoding with the run's seed,
        which the run is fine-tuned from (:mod:`.init_from`)."""
        return self.dir(out) / init_from.INIT

    def checkpoint(self, out: Path) -> Path:
        """The checkpoint the run is evaluated with, as its ``trained.json`` says."""
        return located(json.loads(self.trained(out).read_text())["checkpoint"], out)

    def read_result(self, out: Path, split: str) -> Optional[dict[str, Any]]:
        """The run's ``result.json`` of ``split`` (a directory under ``tests/``) with its
        paths located (:func:`located`); None where it has not finished."""
        path = self.result(out, split)
        if not path.exists():
            return None
        result = json.loads(path.read_text())
        for name in PATHS:
            if name in result:
                result[name] = str(located(result[name], out))
        return result

    @property
    def label(self) -> str:
        return f"{self.encoding} seed {self.seed}"


#: The paths a run's ``result.json`` keeps (:func:`stored`).
PATHS = ("checkpoint", "hypotheses", "references", "sources")


def stored(path: Path, out: Path) -> str:
    """``path`` as a run's records keep it: relative to ``out`` where it lies inside it, so
    that a copied or moved ``OUT`` works from its new place; absolute elsewhere (the
    user's prepared data)."""
    try:
        return Path(path).resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return str(Path(path).resolve())


def located(value: str, out: Path) -> Path:
    """A path that :func:`stored` kept, as a path here (records written before paths were
    relative hold absolute ones)."""
    path = Path(value)
    return path if path.is_absolute() else out / path


def runs(encodings: Sequence[str], seeds: int) -> list[Run]:
    return [Run(encoding, seed) for seed in range(1, seeds + 1) for encoding in encodings]


def user_dir(settings: Settings) -> Path:
    """``--user-dir`` of every fairseq command of the comparison: the user's own
    (``--user-dir``, whose ``__init__`` imports the plugin), or the plugin's directory."""
    return Path(settings.user_dir) if settings.user_dir else USER_DIR


def import_user_dir(settings: Settings) -> None:
    """Import the comparison's ``--user-dir`` in this process (once), so that the
    encodings it registers are known here too: in the command before its checks, in a
    launcher's worker or SLURM job before its run. :class:`SystemExit` saying what is
    wrong and what to do (:mod:`fairseq_posenc.tools.experiment.user_dir`)."""
    if settings.user_dir is None:
        return
    try:
        user_dirs.load(Path(settings.user_dir))
    except ValueError as e:
        raise SystemExit(f"posenc-compare: {e}") from None


def arch(settings: Settings, encoding: str) -> str:
    """The row's architecture: ``PREFIX_ENCODING``, a pair's ``PREFIX_ENCODER``; under
    ``--init-from`` every row's is ``transformer_posenc``, the prefix itself."""
    if settings.init_from:
        return settings.arch_prefix
    return f"{settings.arch_prefix}_{of(encoding).encoder}"


def model_flags(settings: Settings, encoding: str) -> list[str]:
    """The flags every run of the row trains with beside ``--arch``: under ``--init-from``
    the checkpoint's model and the row's encoding first (:func:`.init_from.model_flags`),
    then the comparison's (:meth:`.settings.Settings.fairseq_train_flags`), then the row's
    own."""
    row = of(encoding)
    model = init_from.model_flags(settings.init_from, row) if settings.init_from else []
    return [*model, *settings.fairseq_train_flags(), *row.model_flags()]


def architecture(settings: Settings, encoding: str) -> str:
    """The row's model in the report: its architecture, and under ``--init-from`` the model
    flags beside it (the checkpoint's and the row's encoding)."""
    if not settings.init_from:
        return arch(settings, encoding)
    return shlex.join([arch(settings, encoding),
                       *init_from.model_flags(settings.init_from, of(encoding)),
                       *of(encoding).model_flags()])


def batch(settings: Settings, gpus: int) -> Split:
    """The comparison's tokens per update on ``gpus`` GPUs per run (0: the CPU).
    :class:`ValueError` when they do not divide evenly."""
    return split(settings.batch_tokens, settings.max_tokens(), 0 if settings.cpu else gpus)


def train_args(settings: Settings, corpus: Corpus, run: Run, out: Path,
               batch_split: Optional[Split] = None) -> list[str]:
    """``fairseq-train``'s arguments for ``run`` (the program name excluded), its batch
    split as ``batch_split`` says (default: over one GPU, or the CPU)."""
    batch_split = batch_split or batch(settings, 1)
    return [
        str(corpus.bin), "--user-dir", str(user_dir(settings)),
        *(("--task", "translation_extrapolation", "--train-max-len", str(settings.train_max_len))
          if settings.train_max_len else ("--task", "translation")),
        "--source-lang", corpus.source_lang, "--target-lang", corpus.target_lang,
        "--arch", arch(settings, run.encoding), "--seed", str(run.seed),
        "--save-dir", str(run.save_dir(out)), "--no-epoch-checkpoints",
        "--log-format", "simple", "--log-interval", "50",
        *stopping.flags(settings),
        *model_flags(settings, run.encoding),
        *batch_split.flags(),
        # read only where the save directory holds no checkpoint_last.pt (:mod:`.init_from`)
        *(("--finetune-from-model", str(run.init_checkpoint(out))) if settings.init_from
          else ()),
    ]


def parameter_counts(settings: Settings, corpus: Corpus, encodings: Sequence[str],
                     cache: Path) -> dict[str, int]:
    """Each row's parameters, counted as ``posenc-params`` counts them: the model that
    ``fairseq-train`` builds from the comparison's and the row's flags (under
    ``--init-from``, the checkpoint's model with the row's encoding) over the data's joined
    dictionary. Kept in ``cache`` with each row's definition (building a model per row
    takes a moment)."""
    from fairseq.data import Dictionary

    from ..params import count
    from ...plugin.build import model_args

    flags = settings.fairseq_train_flags()
    vocab = len(Dictionary.load(str(corpus.bin / f"dict.{corpus.source_lang}.txt")))
    key = {"flags": flags, "arch_prefix": settings.arch_prefix, "vocab": vocab,
           **({"init_from": settings.init_from.sha256} if settings.init_from else {})}
    cached = json.loads(cache.read_text()) if cache.exists() else {}
    counts = cached.get("counts", {}) if cached.get("key") == key else {}
    defined = cached.get("rows", {}) if counts else {}
    for encoding in encodings:
        row = of(encoding)
        if encoding not in counts or defined.get(encoding, row.to_json()) != row.to_json():
            counts[encoding] = count(model_args(arch(settings, row),
                                                model_flags(settings, row)), vocab)
        defined[encoding] = row.to_json()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": key, "counts": counts, "rows": defined}, indent=1)
                     + "\n")
    return counts
