"""The command-line options of the launchers, the same in ``posenc-compare`` and
``posenc-reproduce``, and their checks (before anything long starts).

Every ``--slurm-*`` text goes into the job script that submitit writes: the partition,
account, time, memory and ``--slurm-option`` values as ``#SBATCH`` lines, ``--slurm-setup``
lines as shell lines after them. sbatch stops reading directives at the first line that is
not one, so a newline inside a value would end them there, silently dropping the directives
after it (the time limit, the requeue signal) and running the rest as shell commands. The
options' types (:func:`directive`, :func:`setup_line`) refuse control characters while the
command line is parsed, before any SLURM command runs.
"""

from __future__ import annotations

import argparse
import unicodedata
from dataclasses import dataclass
from typing import Optional

from .slurm import Slurm, check, parse_time

SLURM_DEFAULTS = Slurm()

#: Unicode categories refused in a job script's values: control characters (newline,
#: carriage return, tab, escape, NUL, ...) and the line and paragraph separators.
_CONTROL = ("Cc", "Zl", "Zp")


def _refuse_control(value: str, allowed: str, what: str) -> str:
    bad = [c for c in value if unicodedata.category(c) in _CONTROL and c not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{value!r} holds the control character {bad[0]!r}: {what} goes into the job "
            "script, where a line break would end sbatch's #SBATCH directives (those after "
            "it silently dropped). Give the value without it; repeat the option for another "
            "sbatch option or setup line")
    return value


def directive(value: str) -> str:
    """An ``#SBATCH`` value, checked (the options' ``type``): no control character."""
    return _refuse_control(value, "", "an sbatch option's value")


def setup_line(value: str) -> str:
    """A ``--slurm-setup`` shell line, checked (the option's ``type``): no control
    character but the tab; each line is an option of its own."""
    return _refuse_control(value, "\t", "a --slurm-setup line")


@dataclass(frozen=True)
class Launcher:
    """Where the runs train: ``local`` (``parallel`` at once; None: the default of
    :meth:`.local.Slots.plan`) or ``slurm`` (a job each, as ``slurm`` asks)."""

    kind: str = "local"
    parallel: Optional[int] = None
    gpus_per_run: int = 1  # 0: the CPU
    slurm: Optional[Slurm] = None

    def to_json(self) -> dict:
        return {"launcher": self.kind, "gpus_per_run": self.gpus_per_run,
                **({"parallel": self.parallel} if self.kind == "local" else {}),
                **({"slurm": self.slurm.to_json()} if self.slurm else {})}


def add(parser: argparse.ArgumentParser, *, slurm_gpus: bool) -> None:
    """The options; ``slurm_gpus``: offer ``--slurm-gpus-per-run`` (a tool whose runs'
    GPUs are not an option of their own)."""
    g = parser.add_argument_group(
        "where the runs train (docs/compare.md, \"On a cluster\")")
    g.add_argument("--launcher", choices=("local", "slurm"), default="local",
                   help="local: on this machine (default); slurm: each run a SLURM job of "
                        "its own, submitted through submitit; the command returns once "
                        "they are submitted, and a rerun collects them")
    g.add_argument("--parallel", type=int, metavar="N",
                   help="local: N runs at once (default: one per visible GPU, 1 on the "
                        "CPU; more than the GPUs shares them; on the CPU the cores are "
                        "divided between the runs)")
    if slurm_gpus:
        g.add_argument("--slurm-gpus-per-run", type=int, metavar="G",
                       help="GPUs of each job, on one node (default 1; 0 with --cpu); the "
                            "update frequency keeps the batch whatever G")
    g.add_argument("--slurm-partition", metavar="NAME", type=directive,
                   help="the jobs' partition")
    g.add_argument("--slurm-account", metavar="NAME", type=directive,
                   help="the account the jobs are charged to")
    g.add_argument("--slurm-time", metavar="TIME", type=directive,
                   help=f"each job's time limit, in SLURM's form (minutes, H:MM:SS, D-HH); "
                        f"a job that reaches it is requeued and continues from its last "
                        f"checkpoint (default {SLURM_DEFAULTS.time_minutes} minutes)")
    g.add_argument("--slurm-cpus-per-run", type=int, metavar="N",
                   help=f"CPUs of each job (default {SLURM_DEFAULTS.cpus_per_run})")
    g.add_argument("--slurm-mem", metavar="MEM", type=directive,
                   help=f"memory of each job, as sbatch --mem (default {SLURM_DEFAULTS.mem})")
    g.add_argument("--slurm-option", action="append", default=[], metavar="KEY=VALUE",
                   type=directive,
                   help="any other sbatch option, as #SBATCH --KEY=VALUE (repeat it: "
                        "--slurm-option qos=high --slurm-option constraint=a100)")
    g.add_argument("--slurm-setup", action="append", default=[], metavar='"LINE"',
                   type=setup_line,
                   help="a shell line each job runs before the run (repeat it), e.g. "
                        "\"module load cuda/12.4\"")


SLURM_ONLY = ("slurm_gpus_per_run", "slurm_partition", "slurm_account", "slurm_time",
              "slurm_cpus_per_run", "slurm_mem", "slurm_option", "slurm_setup")


def of(args: argparse.Namespace, parser: argparse.ArgumentParser, tool: str, *,
       gpus_per_run: int, cpu: bool = False) -> Launcher:
    """The launcher the options ask for, checked (``parser.error`` or :class:`SystemExit`
    with what to do). ``gpus_per_run``: each run's GPUs where no option sets them; ``cpu``:
    the runs train on the CPU (SLURM is asked for CPUs only)."""
    given = [name for name in SLURM_ONLY if getattr(args, name, None)]
    if args.launcher == "local":
        if given:
            parser.error(f"--{given[0].replace('_', '-')} is for --launcher slurm")
        if args.parallel is not None and args.parallel < 1:
            parser.error("--parallel must be at least 1")
        return Launcher("local", args.parallel, 0 if cpu else gpus_per_run)
    if args.parallel is not None:
        parser.error("--parallel is for --launcher local: SLURM runs the jobs as its "
                     "resources allow")
    gpus = getattr(args, "slurm_gpus_per_run", None)
    if cpu and gpus:
        parser.error("--cpu asks SLURM for CPUs only: drop --slurm-gpus-per-run")
    gpus = 0 if cpu else (gpus_per_run if gpus is None else gpus)
    if gpus < 0 or (args.slurm_cpus_per_run is not None and args.slurm_cpus_per_run < 1):
        parser.error("--slurm-gpus-per-run must be at least 0, --slurm-cpus-per-run 1")
    try:
        minutes = (parse_time(args.slurm_time) if args.slurm_time
                   else SLURM_DEFAULTS.time_minutes)
    except ValueError:
        parser.error(f"--slurm-time {args.slurm_time}: give minutes, H:MM:SS or D-HH:MM:SS")
    options = []
    for option in args.slurm_option:
        key, sep, value = option.partition("=")
        if not sep or not key.strip("-"):
            parser.error(f"--slurm-option {option}: write KEY=VALUE, e.g. qos=high")
        options.append((key.strip("-"), value))
    check(tool)
    return Launcher("slurm", None, gpus, Slurm(
        gpus_per_run=gpus, cpus_per_run=args.slurm_cpus_per_run or SLURM_DEFAULTS.cpus_per_run,
        mem=args.slurm_mem or SLURM_DEFAULTS.mem, time_minutes=minutes,
        partition=args.slurm_partition, account=args.slurm_account, options=tuple(options),
        setup=tuple(args.slurm_setup)))
