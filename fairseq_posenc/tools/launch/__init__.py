"""Where the runs of ``posenc-compare`` and ``posenc-reproduce`` train: one after the other in
this process (the default), several at once on this machine (``--launcher local --parallel
N``), or each as a SLURM job of its own (``--launcher slurm``), submitted through submitit.

Modules, one responsibility each:

* :mod:`.batch` -- the tokens per update of a run, split over the GPUs it is given
  (``--max-tokens``, ``--update-freq``, ``--distributed-world-size``);
* :mod:`.tasks` -- a run as the launchers see it (a function and its arguments, a home
  directory) and what became of it: finished, queued, ended without finishing, new;
* :mod:`.local` -- up to N runs at once on this machine, each in a process of its own
  (:mod:`.worker`), the GPUs or the CPU's threads divided between them;
* :mod:`.slurm` -- a SLURM job per run (:mod:`.slurm_job` is the job's function), the
  jobs' states read from ``squeue`` (SLURM's accounting, which ``sacct`` reads, is optional);
* :mod:`.lock` -- one command at a time on a directory, one process tree at a time on a
  run (a run whose process outlived an earlier command is waited for);
* :mod:`.lifetime` -- the processes a command starts end with it (Linux's
  ``PR_SET_PDEATHSIG``; SIGTERM and SIGHUP stop them as Ctrl-C does);
* :mod:`.launcher_flags` -- the command-line options both tools share.

Importing this package loads neither torch, fairseq nor submitit.
"""
