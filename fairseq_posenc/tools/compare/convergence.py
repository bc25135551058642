"""Whether a run was still improving when its training stopped, and how the report says so.

A difference between encodings measured after a small budget may be training speed (one
encoding gets there sooner), not final quality. The rule, for one trained run
(:func:`verdict`, the one place it is computed; ``docs/compare.md``, "Still improving"):

* the **window** is the validations of the last :data:`WINDOW` of the run's updates, from
  ``0.8 T`` to ``T``, ``T`` the update of its last validation; it needs :data:`MIN_POINTS`;
* the **fall** is how much the least-squares line through the window's losses drops from
  the window's first validation to its last (its slope times their distance in updates):
  every validation counts, so one noisy point does not decide it;
* the **threshold** is the spread between seeds, the sample standard deviation of the final
  validation losses of the encoding's trained seeds (two or more), or, with one seed,
  :data:`ONE_SEED_FALL` of the line's loss at the window's start;
* the run is **still improving** when the fall exceeds the threshold: what the loss would
  still gain is larger than what a seed changes. Without enough validations it is unknown
  (``None``), with the reason.

Under ``--max-update U`` every run validates every ``U / VALIDATIONS`` updates (besides
fairseq's validation at each epoch's end), so the window holds five validations or more;
under ``--max-epoch E`` it validates at each epoch's end, which gives the window three
validations from ``E >= 10`` on (:mod:`.stopping`). A run that ``--until-converged`` stopped
by its patience is not improving, whatever its window.

A comparison row (an encoding against the baseline) is marked :data:`MARK` when a run of
either is still improving, in every table of the report, and the table of runs marks each run
that is; the report explains the marker once (:func:`explanation`), and each marked table
points to it (:func:`any_marked`).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional, Sequence

from .stopping import VALIDATIONS, describe

#: The part of a run's updates whose validations decide whether it is still improving.
WINDOW = 0.2
#: Validations the window needs: a line through fewer is one pair of points.
MIN_POINTS = 3
#: The fall, relative to the loss at the window's start, that counts with one seed.
ONE_SEED_FALL = 0.01
#: The marker of a row whose difference may be training speed.
MARK = "†"


@dataclass(frozen=True)
class Verdict:
    """Whether one run was still improving, and the numbers that say so."""

    still_improving: Optional[bool]
    reason: str
    window: Optional[tuple[int, int]] = None  # the first and last validation's updates
    points: int = 0  # validations in the window
    fall: Optional[float] = None  # the line's drop over the window, in loss units
    relative_fall: Optional[float] = None  # fall over the line's loss at the window's start
    threshold: Optional[float] = None  # in loss units
    threshold_rule: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("still_improving")
        out["window"] = list(self.window) if self.window else None
        return out


def epochs_note(max_epoch: Optional[int]) -> Optional[str]:
    """What a ``--max-epoch`` too small for the rule means, said before training."""
    if not max_epoch or max_epoch >= 10:
        return None
    return (f"--max-epoch {max_epoch} validates each run {max_epoch} times (each epoch's end): "
            f"too few for the report to say whether a run is still improving (the last "
            f"{WINDOW:.0%} of its updates must hold {MIN_POINTS} validations: --max-epoch 10 "
            f"or more, or --max-update, which validates every {100 // VALIDATIONS}%)")


def curve(points: Iterable[Sequence[float]]) -> list[tuple[int, float]]:
    """A run's validations in update order, one per update: where a resumed training repeats
    an update of an interrupted part (from its last checkpoint on), the later loss."""
    by_update = {int(u): float(loss) for u, loss in points}
    return sorted(by_update.items())


def _line(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope of loss against updates."""
    xs = [float(u) for u, _ in points]
    ys = [loss for _, loss in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def seed_spread(final_losses: Sequence[float]) -> Optional[float]:
    """The spread between seeds: the sample standard deviation of their final validation
    losses; None with fewer than two seeds."""
    return statistics.stdev(final_losses) if len(final_losses) >= 2 else None


#: What gives the window enough validations, per way of stopping (``until_converged``).
MORE_VALIDATIONS = {False: "train with --max-update, or --max-epoch 10 or more",
                    True: "a smaller --validate-every, or a larger cap --max-update"}


def verdict(points: Iterable[Sequence[float]], spread: Optional[float] = None,
            seeds: int = 1, until_converged: bool = False) -> Verdict:
    """The rule of the module docstring for one run's validations ``(update, loss)``;
    ``spread``: :func:`seed_spread` of the encoding's ``seeds`` trained seeds (None: one);
    ``until_converged``: the runs stop by ``--until-converged`` (what a too short window
    asks for differs)."""
    validations = curve(points)
    if not validations:
        return Verdict(None, "no validation loss in its train.log (validation disabled?)")
    end = validations[-1][0]
    window = [(u, loss) for u, loss in validations if u >= (1 - WINDOW) * end]
    first, last = window[0][0], window[-1][0]
    if len(window) < MIN_POINTS:
        return Verdict(None, f"{len(window)} validation(s) in the last {WINDOW:.0%} of its "
                             f"updates ({first}-{last}), the rule needs {MIN_POINTS}: "
                             f"{MORE_VALIDATIONS[until_converged]}",
                       window=(first, last), points=len(window))
    intercept, slope = _line(window)
    start = intercept + slope * first
    fall = -slope * (last - first)
    relative = fall / start if start else None
    if spread is not None:
        threshold = spread
        rule = f"the sd of {seeds} seeds' final validation losses"
        said = f"fell {fall:.3f} ({first}-{last})"
        than = f"the seeds' sd {spread:.3f}"
    else:
        threshold = ONE_SEED_FALL * start
        rule = f"{ONE_SEED_FALL:.0%} of the loss at the window's start (one seed)"
        said = f"fell {100 * relative:.1f}% ({first}-{last})" if relative is not None else (
            f"fell {fall:.3f}")
        than = f"{ONE_SEED_FALL:.0%}"
    improving = fall > threshold
    return Verdict(improving, f"{said}, {'more' if improving else 'not more'} than {than}",
                   window=(first, last), points=len(window), fall=round(fall, 4),
                   relative_fall=None if relative is None else round(relative, 4),
                   threshold=round(threshold, 4), threshold_rule=rule)


def annotate(records: Sequence[dict[str, Any]], until_converged: bool = False) -> None:
    """Add ``still_improving`` and ``convergence`` (the verdict's numbers and reason) to each
    run record of ``report.json`` (``encoding``, ``checkpoint``: None until trained,
    ``validation``, ``stopped``); the spread between seeds is over each encoding's trained
    runs, and a run that ``--until-converged`` stopped is not improving."""
    trained = [r for r in records if r["checkpoint"] and r["validation"]]
    finals: dict[str, list[float]] = {}
    for r in trained:
        finals.setdefault(r["encoding"], []).append(curve(r["validation"])[-1][1])
    for r in records:
        if not r["checkpoint"]:
            found = Verdict(None, "its training has not finished")
        elif r.get("stopped") == "converged":
            found = Verdict(False, f"converged: no new best validation loss after update "
                                   f"{r['best_update']}, stopped at {r['stopped_at']}")
        else:
            losses = finals.get(r["encoding"], [])
            found = verdict(r["validation"], seed_spread(losses), len(losses),
                            until_converged)
        r["still_improving"] = found.still_improving
        r["convergence"] = found.to_json()


def row_flag(records: Sequence[dict[str, Any]], encodings: Sequence[str]) -> dict[str, Any]:
    """For a comparison row (``encodings``: the row's and the baseline's): ``still_improving``
    (True when a trained run of them is, None when none is but one is unknown) and the
    runs that are."""
    runs = [r for r in records if r["encoding"] in encodings and r["checkpoint"]]
    states = [r["still_improving"] for r in runs]
    flag = True if True in states else (None if None in states or not states else False)
    return {"still_improving": flag,
            "still_improving_runs": [f"{r['encoding']} seed {r['seed']}" for r in runs
                                     if r["still_improving"]]}


def marked(label: str, flag: Optional[bool]) -> str:
    """A table cell with the marker where ``flag`` is True."""
    return f"{label} {MARK}" if flag else label


def explanation(settings: dict[str, Any]) -> str:
    """The marker's one explanation in the report, for the comparison rows and the runs
    alike."""
    longer = ("raise --max-update: the runs continue from their last checkpoint"
              if settings.get("max_update") else "more epochs, or --max-update")
    if settings.get("until_converged"):
        longer = ("raise the cap --max-update: the runs that reached it continue from their "
                  "last checkpoint, the converged ones stay")
    return (f"{MARK}: after an encoding, a run of it or of the baseline was still improving "
            "when its training stopped; in the table of runs, that run was (its validation "
            f"loss fell over the last {WINDOW:.0%} of its updates by more than the spread "
            f"between seeds, or by more than {ONE_SEED_FALL:.0%} with one seed): the "
            "difference may be training speed, not final quality: train longer "
            f"({longer}).")


def any_marked(rows: Iterable[dict[str, Any]]) -> bool:
    """Whether a table of ``rows`` (comparison rows or runs) carries the marker."""
    return any(r.get("still_improving") for r in rows)


def stopped_cell(record: dict[str, Any], patience: Optional[int]) -> str:
    """The runs table's ``stopped`` cell: where and why (:func:`.stopping.describe`), and for
    a run at the cap whether it was still improving there."""
    said = describe(record, patience)
    if record.get("stopped") == "cap" and record.get("still_improving") is not None:
        said += f", still improving {MARK}" if record["still_improving"] else ", not improving"
    return said


def cell(record: dict[str, Any]) -> str:
    """The runs table's ``still improving`` cell: yes / no / unknown, with the reason."""
    state = {True: f"yes {MARK}", False: "no", None: "unknown"}[record["still_improving"]]
    return f"{state}: {record['convergence']['reason']}"

