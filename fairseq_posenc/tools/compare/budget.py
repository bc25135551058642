"""Raising a finished comparison's ``--max-update``: its runs continue, they do not start over.

A rerun into the same ``OUT`` whose settings differ from ``OUT/settings.json`` only by a
larger ``--max-update`` is a raise (:func:`change`). Every trained run's results of the old
budget move to ``runs/ENC/seedK/budgetU/`` (``trained.json``, ``tests/``, ``inspect/``), so
the run trains again: fairseq-train resumes from its ``checkpoint_last.pt`` at update ``U``
and stops at the new budget, and its translations, scores and pictures are made again from
the new checkpoint. The run's record keeps both budgets (:func:`history`).

The tiny and base recipes' learning rate (inverse square root) depends on the update only,
so a run continued from ``U`` to ``U2`` follows the schedule of a run trained to ``U2`` from
the start. Under ``--until-converged`` ``--max-update`` is the cap: a raise continues the runs
that reached it, and a run that converged before it stays as it is (its stop does not
depend on the cap). What is refused, before anything moves:

* a lower ``--max-update``: a trained run cannot be untrained;
* a learning-rate schedule laid over ``--max-update`` (:data:`BUDGET_SCHEDULES`): a continued
  run would not follow the schedule of a run trained to the new budget;
* with ``--checkpoint avgN`` (checkpoints every 1% of ``--max-update``, the last ``N``
  kept; under ``--until-converged`` every validation, whatever the cap), a raise whose continued part saves fewer than ``N`` checkpoints at the new budget's
  1% (:func:`continues`): the average would mix the old budget's checkpoints in. Otherwise
  it is over the same updates as a run trained to the new budget from the start;
* ``--report-only``, which would leave every run without results.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

from ..experiment.checkpoints import interval_flags
from .settings import Settings, last_flag as _flag

#: fairseq's learning-rate schedulers whose schedule is laid over ``--max-update``.
BUDGET_SCHEDULES = ("cosine", "polynomial_decay", "tri_stage")

#: What a raise moves out of a run's directory, ``trained.json`` last (it says the run is
#: trained: an interrupted raise leaves it until the rest has moved).
MOVED = ("tests", "inspect", "inspect.log", "trained.json")


def interval(rule: str, max_update: int) -> tuple[int, int]:
    """``avgN``'s checkpoint interval at ``max_update`` and ``N`` (0, 0 for other rules)."""
    flags = interval_flags(rule, max_update)
    if not flags:
        return 0, 0
    return (int(_flag(flags, "--save-interval-updates")),
            int(_flag(flags, "--keep-interval-updates")))


def continues(rule: str, was: int, now: int) -> bool:
    """Whether a run continued from ``was`` to ``now`` updates saves ``avgN``'s ``N``
    checkpoints at the new budget's interval (fairseq saves at its multiples); True for
    other rules."""
    every, n = interval(rule, now)
    return not n or now // every - was // every >= n


def enough_raise(rule: str, was: int) -> Optional[int]:
    """A budget from which on every raise of ``was`` :func:`continues` the runs: a continued
    part of ``N`` intervals or more, ``now - was >= N * max(1, now // 100)``, holds at least
    when ``now >= was + N`` and ``now >= was / (1 - N / 100)``. None for ``N`` of 100 or
    more, which no raise continues."""
    _, n = interval(rule, was)
    if not n:
        return was + 1
    if n >= 100:
        return None
    return max(was + n, -(-100 * was // (100 - n)))


def change(out: Path, old: Settings, new: Settings, report_only: bool,
           say: Callable[[str], None]) -> bool:
    """True when ``new`` raises ``old``'s ``--max-update`` and nothing else differs: every
    trained run in ``out`` is made to continue (the module docstring). SystemExit, with why
    and what to do, for a lower ``--max-update`` or a raise that cannot continue the runs;
    False for any other difference (the caller names them)."""
    if not old.max_update or not new.max_update:
        return False
    if dataclasses.replace(old, max_update=new.max_update) != new:
        return False
    was, now = old.max_update, new.max_update
    elsewhere = ("choose another OUT, or --force to start over (deletes its runs, data and "
                 "report)")
    if now < was:
        raise SystemExit(f"posenc-compare: {out} holds runs trained to --max-update {was}: "
                         f"lowering it to {now} is refused (a trained run cannot be "
                         f"untrained). Rerun with --max-update {was} or higher (its runs "
                         f"continue), {elsewhere}")
    if report_only:
        raise SystemExit(f"posenc-compare: --report-only with --max-update {now} (the runs in "
                         f"{out} are trained to {was}) would train nothing and report nothing: "
                         f"drop --report-only to continue the runs to {now}, or rerun with "
                         f"--max-update {was}")
    scheduler = _flag(new.fairseq_train_flags(), "--lr-scheduler")
    if scheduler in BUDGET_SCHEDULES:
        raise SystemExit(f"posenc-compare: --lr-scheduler {scheduler} lays its schedule over "
                         f"--max-update: runs continued from {was} to {now} updates would not "
                         f"follow the schedule of runs trained to {now} from the start, so "
                         f"the raise is refused. Rerun with --max-update {was}, or {elsewhere}")
    if not new.until_converged and not continues(old.checkpoint, was, now):
        _, n = interval(old.checkpoint, now)
        enough = enough_raise(old.checkpoint, was)
        instead = (f"Raise it to {enough} or more (the average is then over the same "
                   f"updates as a run trained to the new budget from the start), rerun"
                   if enough else "Rerun")
        raise SystemExit(
            f"posenc-compare: --checkpoint {old.checkpoint} averages the last {n} checkpoints "
            f"saved every 1% of --max-update: runs continued from {was} to {now} updates "
            f"would save fewer than {n} at the new budget's 1%, and the average would mix "
            f"in checkpoints of the old budget. {instead} with --max-update {was}, or "
            f"{elsewhere}")
    trained = sorted(out.glob("runs/*/seed*/trained.json"))
    converged = [m for m in trained
                 if json.loads(m.read_text()).get("stopped") == "converged"]
    trained = [m for m in trained if m not in converged]
    what = "cap" if new.until_converged else "budget"
    say(f"--max-update {now} raises the {what} of {was} updates: {len(trained)} trained "
        f"run(s) continue from their checkpoint_last.pt; the results at {was} updates move "
        f"to runs/ENC/seedK/budget{was}/"
        + (f"; {len(converged)} converged run(s) stay as they are" if converged else ""))
    for marker in trained:
        keep(marker.parent, was)
    return True


def keep(run_dir: Path, max_update: int) -> None:
    """Move a trained run's results of ``max_update`` updates to ``run_dir/budgetU/`` (a
    destination already there from an interrupted raise holds the same budget's results)."""
    dest = run_dir / f"budget{max_update}"
    dest.mkdir(exist_ok=True)
    for name in MOVED:
        source = run_dir / name
        if not source.exists():
            continue
        target = dest / name
        if target.is_dir():
            shutil.rmtree(target)
        source.replace(target)


def earlier(run_dir: Path) -> list[dict[str, Any]]:
    """The budgets a run was trained to before its current one, oldest first: each budget's
    ``max_update``, the update its training reached and its test scores."""
    out = []
    for path in run_dir.glob("budget*/trained.json"):
        trained = json.loads(path.read_text())
        tests = {}
        for result in sorted(path.parent.glob("tests/*/result.json")):
            scores = json.loads(result.read_text())
            tests[scores["split"]] = {"bleu": scores["bleu"], "chrf": scores["chrf"]}
        out.append({"max_update": int(path.parent.name[len("budget"):]),
                    "last_update": trained.get("last_update"), "tests": tests})
    return sorted(out, key=lambda e: e["max_update"])


def history(run_dir: Path, max_update: Optional[int], trained: bool) -> dict[str, Any]:
    """A run record's ``budgets`` (each ``--max-update`` it was trained to, its current one
    last once trained; None under ``--max-epoch``) and ``earlier`` (:func:`earlier`)."""
    before = earlier(run_dir)
    return {"budgets": [e["max_update"] for e in before] + ([max_update] if trained else []),
            "earlier": before}


def note(report: dict[str, Any]) -> str:
    """The report's words on a raise: `` (raised from 12 updates: ...)`` or nothing."""
    raised = sorted({e["max_update"] for r in report["runs"] for e in r.get("earlier", [])})
    if not raised:
        return ""
    return (f" (raised from {', then '.join(map(str, raised))} updates: each run continued "
            "from its last checkpoint)")
