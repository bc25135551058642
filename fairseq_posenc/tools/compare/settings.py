"""What one comparison is, written to ``OUT/settings.json`` on its first run.

A comparison grows: a rerun into the same ``OUT`` may add rows (encodings) or seeds (only
the new runs train; a label keeps its row's definition, recorded under ``rows``) and may
change what the report shows (the baseline, the length bins). Every other setting decides
what a run computes, so a rerun with a different value would mix runs that are not
comparable: :func:`differences` names them and the command stops before training
(``--force`` starts over). A larger ``--max-update`` is the exception: the runs continue
from their last checkpoint (:mod:`.budget`); under ``--until-converged`` it raises the cap,
and only the runs that reached it continue.

The recipes per model size are the flags every ``fairseq-train`` gets before the user's
``--train-args``: ``tiny`` is the demo's (2+2 layers, 128 wide; trains on a CPU in
minutes), ``base`` the papers' Transformer base schedule (Vaswani et al. 2017, sec. 5.3:
Adam (0.9, 0.98), inverse square root with 4000 warm-up steps, label smoothing 0.1),
as fairseq's WMT recipe sets it (learning rate 7e-4, shared embeddings). Under
``--init-from`` every row fine-tunes the checkpoint's architecture with the plugin's
fine-tuning recipe (:data:`fairseq_posenc.plugin.model_flags.FINETUNE_RECIPE`: the same
optimizer, schedule, criterion and batch, learning rate 1e-4 with 200 warm-up updates), and
the checkpoint is a setting (:class:`InitFrom`): a rerun with another one, or with the same
file changed, is a difference.

A run's batch is a number of tokens per update (:data:`BATCH_TOKENS`, ``--batch-tokens``),
the same whatever the GPUs that train it: how the update is split over them (tokens per GPU
and pass, passes per update) is the launcher's (:func:`fairseq_posenc.tools.launch.batch.split`),
and ``settings.json`` records the latest split beside the settings (``launch``), each
run's ``trained.json`` its own.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..textprep.text import Cleaning

#: The registered architecture families: ``PREFIX_ENCODING`` for every encoding.
SIZES = {"tiny": "transformer_tiny", "base": "transformer_wmt_en_de"}

_COMMON = ("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr-scheduler",
           "inverse_sqrt", "--criterion", "label_smoothed_cross_entropy",
           "--label-smoothing", "0.1", "--max-tokens", "4096")

#: fairseq-train flags per size, before the user's ``--train-args``.
RECIPES: dict[str, tuple[str, ...]] = {
    "tiny": (*_COMMON, "--lr", "1e-3", "--warmup-updates", "200"),
    "base": (*_COMMON, "--lr", "7e-4", "--warmup-updates", "4000",
             "--share-all-embeddings", "--clip-norm", "0.0", "--weight-decay", "0.0"),
}


#: The recipe of ``--init-from``, beside the sizes: every row fine-tunes the checkpoint's
#: architecture with the plugin's fine-tuning recipe
#: (:data:`fairseq_posenc.plugin.model_flags.FINETUNE_RECIPE`).
FINETUNE = "finetune"

#: Tokens per update per size: the tiny recipe's one pass of 4096 tokens, the base recipe's
#: 8 x 4096 (fairseq's WMT recipe on 8 GPUs, or --update-freq 8 on one); ``--init-from``'s
#: fine-tuning, one pass of its recipe's 4096, whatever the checkpoint's size.
BATCH_TOKENS = {"tiny": 4096, "base": 32768, FINETUNE: 4096}

#: Tokens per update of a comparison written before the batch was a setting: one pass of
#: the recipes' --max-tokens, as a run on the CPU or one GPU trained.
EARLIER_BATCH_TOKENS = 4096

#: Training pairs kept from raw data: fairseq's WMT preparation (``clean-corpus-n.perl
#: -ratio 1.5 1 250``): both sides of 1 to 250 Moses tokens, neither over 1.5 times the other.
DEFAULT_CLEANING = Cleaning(min_len=1, max_len=250, max_ratio=1.5,
                            rule="fairseq's WMT preparation (clean-corpus-n.perl -ratio 1.5 1 250)")


@dataclass(frozen=True)
class InitFrom:
    """``--init-from``: the trained checkpoint every row starts from, converted to the row's
    encoding (:mod:`.init_from`), as read before any work."""

    path: str  # resolved
    sha256: str
    model: str  # transformer (fairseq's) or transformer_posenc (the plugin's)
    architecture: Optional[str]  # its --arch, where it records one
    encoding: str  # its encodings, as the plugin's tag names them: NAME or ENCODER/DECODER
    updates: int  # the updates it was trained for
    #: its model flags beside ``--arch transformer_posenc``, its encodings' aside
    flags: tuple[str, ...]
    #: a plugin checkpoint's values of its encodings' options, ``(name, value)``, which a
    #: row of an encoding with that option takes, as a conversion carries them over
    options: tuple[tuple[str, Any], ...] = ()

    def describe(self) -> str:
        """``PATH (sha256 ...; its encoding, updates)``, a rerun's difference."""
        return (f"{self.path} (sha256 {self.sha256[:12]}..., {self.encoding}, {self.updates} "
                "updates)")

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "InitFrom":
        return cls(**{**obj, "flags": tuple(obj["flags"]),
                      "options": tuple(tuple(o) for o in obj.get("options", ()))})


@dataclass(frozen=True)
class Settings:
    """Everything that decides what a run computes (see the module docstring)."""

    data: str  # --data, resolved
    source_lang: str
    target_lang: str
    #: architectures are ARCH_PREFIX_ENCODING; under --init-from every row's architecture,
    #: transformer_posenc
    arch_prefix: str
    recipe: tuple[str, ...]  # RECIPES[size]; under --init-from the fine-tuning recipe
    train_args: tuple[str, ...]  # --train-args, split as a shell would
    max_update: Optional[int]
    max_epoch: Optional[int]
    valid: str
    tests: tuple[str, ...]
    cpu: bool
    checkpoint: str  # last, best or avgN
    bpe_merges: int  # raw data only
    cleaning: Cleaning  # raw data only
    #: --train-max-len: train on the pairs of at most this many tokens per side (subwords
    #: and </s>, --task translation_extrapolation); None: every pair
    train_max_len: Optional[int] = None
    #: --batch-tokens: tokens per update, whatever the GPUs
    #: (:mod:`fairseq_posenc.tools.launch.batch`)
    batch_tokens: int = EARLIER_BATCH_TOKENS
    #: --until-converged: each run stops after ``patience`` validations every
    #: ``validate_every`` updates without a new best, ``max_update`` is the cap
    #: (:mod:`.stopping`)
    until_converged: bool = False
    patience: Optional[int] = None
    validate_every: Optional[int] = None
    #: --user-dir: the user's own fairseq --user-dir (their encodings), absolute; every
    #: fairseq command gets it instead of the plugin's directory. None: the plugin's
    user_dir: Optional[str] = None
    #: --init-from: the checkpoint every row is fine-tuned from; None: from scratch
    init_from: Optional[InitFrom] = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Settings":
        fields = {f.name for f in dataclasses.fields(cls)}
        # written before --train-max-len, --batch-tokens, --until-converged, --user-dir or
        # --init-from existed; "launch" records how the runs were split over GPUs, not what
        # they compute, and "rows" each row's definition (:func:`read_rows`)
        obj = {"train_max_len": None, "batch_tokens": EARLIER_BATCH_TOKENS,
               "until_converged": False, "patience": None, "validate_every": None,
               "user_dir": None, "init_from": None,
               **{k: v for k, v in obj.items() if k not in ("launch", "rows")}}
        unknown = set(obj) - fields
        if unknown or fields - set(obj):
            raise ValueError(f"settings.json has fields {sorted(obj)}, expected "
                             f"{sorted(fields)}")
        values = dict(obj)
        values["cleaning"] = Cleaning(**obj["cleaning"])
        for name in ("recipe", "train_args", "tests"):
            values[name] = tuple(obj[name])
        if obj["init_from"] is not None:
            values["init_from"] = InitFrom.from_json(obj["init_from"])
        return cls(**values)

    def fairseq_train_flags(self) -> list[str]:
        """The flags every run's ``fairseq-train`` gets alike (data, arch, seed and save
        directory aside)."""
        stop = (["--max-update", str(self.max_update)] if self.max_update else []) + (
            ["--max-epoch", str(self.max_epoch)] if self.max_epoch else [])
        return [*self.recipe, *stop, *self.train_args, *(["--cpu"] if self.cpu else [])]

    def max_tokens(self) -> int:
        """Tokens per pass before the launcher's split: the flags' last ``--max-tokens``."""
        return int(last_flag(self.fairseq_train_flags(), "--max-tokens") or 4096)


def last_flag(flags: Sequence[str], name: str) -> Optional[str]:
    """The last value of ``name`` in ``flags`` (fairseq's argparse keeps the last)."""
    value = None
    for i, flag in enumerate(flags):
        if flag == name and i + 1 < len(flags):
            value = flags[i + 1]
        elif flag.startswith(name + "="):
            value = flag.split("=", 1)[1]
    return value


def differences(old: Settings, new: Settings) -> list[str]:
    """``name: X before, Y now`` for every setting that differs (the checkpoint of
    ``--init-from`` by its path, SHA-256, encoding and updates, or ``none``)."""
    a, b = old.to_json(), new.to_json()

    def shown(settings: Settings, name: str, value: Any) -> str:
        if name != "init_from":
            return repr(value)
        return settings.init_from.describe() if settings.init_from else "none (from scratch)"

    return [f"{name}: {shown(old, name, a[name])} before, {shown(new, name, b[name])} now"
            for name in a if a[name] != b[name]]


def read(path: Path) -> Optional[Settings]:
    if not path.exists():
        return None
    try:
        return Settings.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, KeyError) as e:
        raise SystemExit(f"posenc-compare: {path} is not a comparison's settings ({e}); "
                         "choose another OUT, or --force to start over there") from None


def read_rows(path: Path) -> dict[str, Any]:
    """Each row's definition by its label, as ``path`` records them (:mod:`.encoding_rows`); empty
    for a comparison that records none (written before rows had definitions: every row
    was an encoding's name)."""
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")).get("rows") or {})
    except (ValueError, AttributeError):
        return {}  # not a comparison's settings: read() says so


def write(path: Path, settings: Settings, launch: Optional[dict[str, Any]] = None,
          rows: Optional[dict[str, Any]] = None) -> None:
    """``settings``, and with ``launch`` how this command runs them (launcher, GPUs per run,
    the batch's split), which a rerun may change; with ``rows`` each row's definition by
    its label, added to those recorded (a rerun may add rows, and leave some out, but not
    define a label otherwise: :func:`.encoding_rows.changed`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    recorded = {**read_rows(path), **(rows or {})}
    obj = {**settings.to_json(), **({"launch": launch} if launch else {}),
           **({"rows": recorded} if recorded else {})}
    tmp.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
