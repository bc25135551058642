"""A reproduction's trainings and the checkpoint each paper evaluates: the recipe's
``fairseq-train`` run through the shared runner (:mod:`fairseq_posenc.tools.experiment`), and the
paper's checkpoint rule (the last, the best on the validation set, or the average of the
last interval checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..experiment import checkpoints
from ..experiment.checkpoints import average_checkpoints  # noqa: F401  (this module's API)
from ..experiment.fairseq_run import progress, run_fairseq
from ..experiment.trainlog import finished, keep_earlier
from ..launch.dispatch import dispatch, follow
from ..launch.launcher_flags import Launcher
from ..launch.tasks import Task
from .recipes import Paper
from .runs import Run, Scale, checkpoint_rule, train_args


def label(run: Run) -> str:
    return f"{run.paper.key} {run.row.label} {run.column.dataset} {run.pair} seed {run.seed}"


def train(run: Run, data: Path, work: Path, scale: Scale, in_process: bool = False) -> None:
    """One training, resuming from its ``checkpoint_last.pt``; the log of an earlier part is
    kept as ``train.N.log``."""
    save = run.save_dir(work)
    save.mkdir(parents=True, exist_ok=True)
    progress(f"train {label(run)}")
    keep_earlier(save / "train.log")
    run_fairseq("fairseq-train", train_args(run, data, work, scale), log=save / "train.log",
                in_process=in_process)


def train_all(runs: Sequence[Run], data: Path, work: Path, scale: Scale,
              launcher: Launcher) -> None:
    """Every training as ``launcher`` says (:mod:`fairseq_posenc.tools.launch`): in turn here (a
    finished one too: fairseq-train loads its last checkpoint and stops), N at once, or a
    SLURM job each; the SLURM launcher skips the finished ones and those queued."""
    tasks = [Task(label(r), r.save_dir(work), train, (r, data, work, scale),
                  log=r.save_dir(work) / "train.log") for r in runs]
    by_label = {t.label: r for t, r in zip(tasks, runs)}

    def in_turn(todo: list[Task]) -> None:
        for task in todo:
            train(by_label[task.label], data, work, scale)

    done = [launcher.kind == "slurm" and finished(t.log) for t in tasks]
    outcome = dispatch(tasks, done, launcher, tool="posenc-reproduce",
                       folder=work / "slurm", say=progress, in_turn=in_turn)
    if outcome.pending:
        follow(outcome.pending, work / "slurm", progress)
        progress("rerun this command to resubmit what ended without finishing; then "
                 "posenc-reproduce evaluate ... once they have finished")
    if outcome.failed:
        raise SystemExit("posenc-reproduce: trainings failed: "
                         + ", ".join(t.label for t in outcome.failed))


def evaluated_checkpoint(paper: Paper) -> str:
    """The file name of the checkpoint ``paper`` evaluates (see :func:`final_checkpoint`)."""
    return checkpoints.checkpoint_name(checkpoint_rule(paper))


def final_checkpoint(run: Run, work: Path) -> Path:
    """The checkpoint the paper evaluates (averaged here where the paper averages)."""
    return checkpoints.final_checkpoint(run.save_dir(work), checkpoint_rule(run.paper),
                                        how_to_train="posenc-reproduce train ...")
