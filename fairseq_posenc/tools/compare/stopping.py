"""How a comparison's runs validate, save and stop, and the record of where each one stopped.

Three ways to stop a run (``docs/compare.md``, "Training until converged"):

* ``--max-update U``: at update ``U``, validating every ``U / VALIDATIONS`` updates (and at
  each epoch's end, fairseq's default);
* ``--max-epoch E``: at the end of epoch ``E``, validating at each epoch's end;
* ``--until-converged`` (with ``--max-update U`` as its cap): validating every
  ``--validate-every V`` updates and nowhere else, a run stops after ``--patience P``
  validations in a row without a new best validation loss (fairseq's ``--patience``, which
  the plugin keeps counting across a resume: :mod:`fairseq_posenc.plugin.patience`), or at
  the cap. fairseq has no switch for its validation and save at each epoch's end: an
  interval of :data:`NEVER` epochs, which no training reaches, turns them off.

Every run saves a checkpoint at each validation (``--save-interval-updates`` follows the
validation interval, whatever sets it), so a run killed at any point loses at most one
validation interval of training; fairseq keeps the newest interval checkpoint beside
``checkpoint_last.pt`` and ``checkpoint_best.pt`` (``avgN`` keeps ``N``, saved every
hundredth of ``U``, or every validation under ``--until-converged``).

Where each run stopped (:func:`outcome`) is computed by the tool from the run's own
validations, one per update as the training kept them (a resumed part discards what an
interrupted one validated after its checkpoint:
:func:`fairseq_posenc.tools.experiment.trainlog.history`), by the rule as stated above
(:func:`stop_point`), and checked against fairseq's own word that it stopped early.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..experiment.checkpoints import interval_flags
from .settings import FINETUNE, Settings, last_flag

#: Validations per run under ``--max-update`` (every ``U // VALIDATIONS`` updates).
VALIDATIONS = 20
#: ``--patience``'s default: validations without a new best before a run stops.
PATIENCE = 5
#: ``--validate-every``'s default per size, in updates: the tiny recipe's run reaches its
#: plateau in a few thousand updates on a corpus of tens of thousands of pairs; the base
#: recipe's update is 8 times the batch, and a validation of a WMT test set costs about as
#: much as 100 of its updates on one GPU; ``--init-from``'s fine-tuning starts from a
#: trained model and is short: as often as the tiny recipe.
VALIDATE_EVERY = {"tiny": 100, "base": 1000, FINETUNE: 100}
#: An interval in epochs that no training reaches (fairseq's "never").
NEVER = 1_000_000_000


def interval(settings: Settings) -> Optional[int]:
    """Updates between a run's validations (None: at each epoch's end only)."""
    if settings.until_converged:
        return settings.validate_every
    if settings.max_update:
        return max(1, settings.max_update // VALIDATIONS)
    return None


def flags(settings: Settings) -> list[str]:
    """The ``fairseq-train`` flags that validate, save and stop a run as the module
    docstring says (``--max-update`` and ``--max-epoch`` themselves are the settings')."""
    every = interval(settings)
    if every is None:
        return []
    out = ["--validate-interval-updates", str(every)]
    if settings.until_converged:
        averaged = interval_flags(settings.checkpoint, 0)
        keep = last_flag(averaged, "--keep-interval-updates") or "1"
        return [*out, "--save-interval-updates", str(every), "--keep-interval-updates", keep,
                "--validate-interval", str(NEVER), "--save-interval", str(NEVER),
                "--patience", str(settings.patience)]
    # avgN's checkpoints every hundredth (fairseq validates at each) or one per validation
    return [*out, *(interval_flags(settings.checkpoint, settings.max_update)
                    or ["--save-interval-updates", str(every), "--keep-interval-updates", "1"])]


def stop_point(validations: Sequence[tuple[int, float]], patience: int) -> Optional[int]:
    """The update of the validation at which ``patience`` validations in a row have had no
    new best (strictly lower) loss; None while none has."""
    best, since = None, 0
    for update, loss in validations:
        if best is None or loss < best:
            best, since = loss, 0
            continue
        since += 1
        if since >= patience:
            return update
    return None


def best(validations: Sequence[tuple[int, float]]) -> Optional[tuple[int, float]]:
    """The first validation with the lowest loss, as fairseq's ``checkpoint_best.pt`` keeps
    it (a later equal loss is not better)."""
    found = None
    for update, loss in validations:
        if found is None or loss < found[1]:
            found = (update, loss)
    return found


def outcome(settings: Settings, validations: Sequence[tuple[int, float]],
            last_update: Optional[int], fairseq_stopped_early: bool) -> dict[str, Any]:
    """Where a trained run stopped and why, for ``trained.json``: ``stopped`` (``converged``,
    ``cap``; ``budget`` outside ``--until-converged``), ``stopped_at`` (the update) and its
    best validation. :class:`RuntimeError` when fairseq's early stop and the rule disagree
    (a resumed count lost: the record would be wrong)."""
    found = best(validations)
    record: dict[str, Any] = {
        "best_update": found[0] if found else None,
        "best_loss": found[1] if found else None}
    if not settings.until_converged:
        return {"stopped": "budget", "stopped_at": last_update, **record}
    point = stop_point(validations, settings.patience)
    if fairseq_stopped_early != (point is not None) or (point and point != last_update):
        raise RuntimeError(
            f"fairseq {'stopped' if fairseq_stopped_early else 'did not stop'} the run early "
            f"at update {last_update}, and its validations say "
            + (f"it converged at {point}" if point else "it had not converged")
            + f" (--patience {settings.patience}): the count was lost on a resume; train it "
              "again from the start (delete its folder)")
    if point is not None:
        return {"stopped": "converged", "stopped_at": point, **record}
    return {"stopped": "cap", "stopped_at": last_update, **record}


def describe(record: dict[str, Any], patience: Optional[int]) -> str:
    """Where a run stopped, in words: ``converged at update 650 (best 400; 5 validations
    without a new best)``, ``cap reached at update 1500``, ``trained to update 1500``."""
    stopped, at = record.get("stopped"), record.get("stopped_at")
    if stopped == "converged":
        return (f"converged at update {at} (best at {record.get('best_update')}, then "
                f"{patience} validations without a new best)")
    if stopped == "cap":
        return f"cap reached at update {at}"
    return f"trained to update {at}" if at is not None else "-"
