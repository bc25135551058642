"""Running a comparison's runs: train, translate every test split, score, inspect.

Each step leaves a file that says it finished (``trained.json``, a split's
``result.json``, ``inspect/index.html``), and a step whose file exists is never run again:
rerunning a comparison trains only what is new or unfinished. An interrupted training
resumes from its ``checkpoint_last.pt`` (fairseq-train's own ``--restore-file`` default in
the run's save directory); the log of each earlier part is kept as ``train.N.log``.

fairseq runs through :mod:`fairseq_posenc.tools.experiment`, the runner ``posenc-reproduce``
uses: ``fairseq-train`` as its console script, as a user runs it, ``fairseq-generate``
inside this process with the same arguments (no interpreter start-up per test split). Their
output goes to each run's logs, and the terminal gets one line per step: the run's number,
encoding and seed, the step, its log, the time so far and an estimate of what remains.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from ..evaluation import scoring
from ..experiment.checkpoints import checkpoint_update, final_checkpoint
from ..experiment.fairseq_run import USER_DIR, logged_to, run_fairseq
from ..experiment.trainlog import (history, keep_earlier, last_update, stopped_early,
                                   validation_losses, words_per_second)
from ..launch.batch import Split
from ..experiment.translate import translate
from ..textprep.files import read_lines, write_text_atomic
from .budget import earlier
from .data import Corpus, inspect_sentence
from . import init_from, placement, stopping
from .plan import Run, batch, model_flags, stored, train_args, user_dir
from .settings import Settings

#: sacreBLEU's default BLEU (cased, 13a tokenization) and chrF, as ``posenc-score`` scores.
METRIC = "cased"


def say(message: str) -> None:
    print(f"[compare] {message}", file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """The run-level lines: ``run i/N: ENC seed K: STEP (log: ...); 3m05s so far, about
    9m left``. The estimate is the mean time of the runs done in this invocation times the
    runs still to do, less the current run's time so far."""

    def __init__(self, runs: Sequence[Run], done: Callable[[Run], bool]):
        self.total = len(runs)
        self.todo = [r for r in runs if not done(r)]
        self.start = time.monotonic()
        self.finished: list[float] = []
        self.run_start = self.start

    def begin(self) -> None:
        self.run_start = time.monotonic()

    def end(self) -> None:
        self.finished.append(time.monotonic() - self.run_start)

    def line(self, index: int, run: Run, step: str) -> str:
        now = time.monotonic()
        left = len(self.todo) - len(self.finished)
        if self.finished:
            eta = statistics.mean(self.finished) * left - (now - self.run_start)
            estimate = f"about {duration(max(eta, 0))} left"
        else:
            estimate = "an estimate after the first run"
        return (f"run {index}/{self.total}: {run.label}: {step}; "
                f"{duration(now - self.start)} so far, {estimate}")


def complete(run: Run, out: Path, settings: Settings) -> bool:
    """Whether every step of ``run`` has finished."""
    return (run.trained(out).exists()
            and all(run.result(out, t).exists() for t in settings.tests)
            and (run.seed != 1 or (run.inspect_dir(out) / "index.html").exists()))


def run_all(settings: Settings, corpus: Corpus, runs: Sequence[Run], out: Path,
            batch_split: Split) -> None:
    """Every run in turn, in this process (the local launcher without ``--parallel``)."""
    progress = Progress(runs, lambda r: complete(r, out, settings))
    for index, run in enumerate(runs, 1):
        if complete(run, out, settings):
            say(f"run {index}/{len(runs)}: {run.label}: finished before, kept")
            continue
        progress.begin()
        run_one(settings, corpus, run, out, batch_split,
                lambda what, run=run, index=index: say(progress.line(index, run, what)))
        progress.end()


def run_one(settings: Settings, corpus: Corpus, run: Run, out: Path, batch_split: Split,
            step: Callable[[str], None]) -> None:
    """Every step of ``run`` that has not finished: train, translate and score every test
    split, inspect (seed 1)."""
    train(settings, corpus, run, out, step, batch_split)
    checkpoint = run.checkpoint(out)
    for test in corpus.tests:
        evaluate(corpus, run, test, checkpoint, out, settings.cpu, step,
                 user_dir=user_dir(settings))
    if run.seed == 1:
        inspect(corpus, run, checkpoint, out, step)


def train(settings: Settings, corpus: Corpus, run: Run, out: Path,
          step: Callable[[str], None], batch_split: Optional[Split] = None) -> None:
    """Train ``run`` unless it has finished, resuming from its ``checkpoint_last.pt`` (under
    ``--init-from``, a run that starts is fine-tuned from the checkpoint converted for it);
    ``batch_split``: the batch over the run's GPUs (default: one GPU, or the CPU)."""
    marker = run.trained(out)
    if marker.exists():
        return
    batch_split = batch_split or batch(settings, 1)
    log = run.train_log(out)
    try:
        resumed = resume_note(run.save_dir(out))
    except ValueError as e:  # a damaged checkpoint_last.pt: what to do, before fairseq starts
        raise SystemExit(f"posenc-compare: {run.label}: {e}") from None
    if settings.init_from:  # a run that starts fine-tunes the checkpoint converted for it
        init_from.start_run(settings.init_from, model_flags(settings, run.encoding), run.seed,
                            run.init_checkpoint(out), run.save_dir(out), step)
    keep_earlier(log)  # an earlier part: fairseq resumes from checkpoint_last.pt
    step(f"training{resumed} (log: {log})")
    started = time.monotonic()
    with _watching(log, settings.max_update, step, settings.until_converged):
        run_fairseq("fairseq-train", train_args(settings, corpus, run, out, batch_split),
                    log=log, say=lambda _: None)
    logs = run.train_logs(out)
    try:
        stop = stopping.outcome(settings, history(logs), last_update(log), stopped_early(log))
    except RuntimeError as e:
        raise SystemExit(f"posenc-compare: {run.label}: {e}") from None
    checkpoint = final_checkpoint(run.save_dir(out), settings.checkpoint)
    speeds = [v for v in map(words_per_second, logs) if v is not None]
    write_text_atomic(marker, json.dumps({
        "checkpoint": stored(checkpoint, out), "last_update": last_update(log), **stop,
        "budgets": [e["max_update"] for e in earlier(run.dir(out))] + [settings.max_update],
        "words_per_second": statistics.median(speeds) if speeds else None,
        "seconds_this_part": round(time.monotonic() - started, 1),
        "batch": batch_split.to_json(), "placement": placement.here(batch_split.gpus)},
        indent=1) + "\n")


def resume_note(save_dir: Path) -> str:
    """``, resuming at update U`` where ``save_dir`` holds a checkpoint_last.pt, which
    fairseq-train resumes from: U is the checkpoint's own update (not the log's last "Saved
    checkpoint" line, which a kill after the checkpoint's copy leaves one validation behind,
    and which an earlier checkpoint copied over it leaves ahead); empty where there is none.
    :class:`ValueError` naming a damaged checkpoint."""
    last = save_dir / "checkpoint_last.pt"
    update = checkpoint_update(last) if last.exists() else None
    return f", resuming at update {update}" if update else ""


#: Seconds between the lines that report a training's progress.
WATCH_SECONDS = 60


@contextlib.contextmanager
def _watching(log: Path, max_update: Optional[int], step: Callable[[str], None],
              cap: bool = False) -> Iterator[None]:
    """While fairseq trains, a line every :data:`WATCH_SECONDS` with the update it has
    reached (read from its log) and, with ``--max-update``, the time this training needs
    for the rest at its pace so far; under ``--until-converged`` (``cap``) the best
    validation so far instead, since where the run stops is not known ahead."""
    stop = threading.Event()
    started = time.monotonic()
    first = last_update(log) if log.exists() else None

    def watch() -> None:
        seen = None
        while not stop.wait(WATCH_SECONDS):
            update = last_update(log) if log.exists() else None
            if update is None or update == seen:
                continue
            seen = update
            rest = ""
            done = update - (first or 0)
            if max_update and done > 0:
                left = (time.monotonic() - started) / done * (max_update - update)
                rest = f", this training about {duration(left)} more"
            if cap:  # --until-converged: the cap is an upper bound, not the end
                step(f"training: update {update} (at most {max_update}; best so far "
                     f"{best_so_far(log)})")
                continue
            step(f"training: update {update}" + (f" of {max_update}" if max_update else "")
                 + rest)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def best_so_far(log: Path) -> str:
    """``loss 3.912 at update 600`` (of the part of the training in ``log``), or ``none``."""
    found = stopping.best(validation_losses(log))
    return f"loss {found[1]:.3f} at update {found[0]}" if found else "none yet"


def evaluate(corpus: Corpus, run: Run, test, checkpoint: Path, out: Path, cpu: bool,
             step: Callable[[str], None], *, name: Optional[str] = None,
             task: str = "translation", flags: Sequence[str] = (),
             user_dir: Path = USER_DIR) -> None:
    """Translate ``test`` with beam 10 and length penalty 0.6, every sentence, and score the
    detokenized output with sacreBLEU against the raw references. ``name``: the directory
    under the run's ``tests/`` (default: the split's name); ``task`` and ``flags``:
    fairseq-generate's task and more of its flags (an inference-time variant's, recorded in
    ``result.json``); ``user_dir``: its ``--user-dir`` (default: the plugin's)."""
    name = name or test.name
    result = run.result(out, name)
    if result.exists():
        return
    where = run.test_dir(out, name)
    step(f"translating {name} ({test.sentences} sentences; log: {where}/generate.log)")
    translation = translate(
        corpus.bin, checkpoint, test.subset, corpus.source_lang, corpus.target_lang,
        where / "generate", corpus.subword, hyp_path=where / f"hyp.{corpus.target_lang}",
        task=task, label=run.label, in_process=True, say=lambda _: None,
        extra=(["--cpu"] if cpu else []) + list(flags),
        user_dir=user_dir)
    refs = read_lines(test.reference)
    scored = scoring.score(translation.hypotheses, refs, METRIC, corpus.target_lang)
    write_text_atomic(result, json.dumps({
        "encoding": run.encoding, "seed": run.seed, "split": test.name,
        "checkpoint": stored(checkpoint, out), "sentences": len(refs),
        "bleu": round(scored.bleu, 2), "chrf": round(scored.chrf, 2),
        "bleu_signature": scored.bleu_signature, "chrf_signature": scored.chrf_signature,
        "untranslated": sorted(translation.untranslated), "notes": translation.notes,
        "hypotheses": stored(translation.hyp_path, out),
        "references": stored(test.reference, out), "sources": stored(test.source, out),
        **({"flags": list(flags)} if flags else {})},
        indent=1) + "\n")
    step(f"{name}: BLEU {scored.bleu:.2f}, chrF {scored.chrf:.2f}")


def inspect(corpus: Corpus, run: Run, checkpoint: Path, out: Path,
            step: Callable[[str], None]) -> None:
    """``posenc-inspect``'s pictures of the trained model, with the attention maps of one
    test source."""
    target = run.inspect_dir(out)
    if (target / "index.html").exists():
        return
    from ..inspection.cli import main as inspect_main

    log = run.dir(out) / "inspect.log"
    step(f"inspecting (log: {log})")
    args = [str(checkpoint), "--out", str(target), "--data", str(corpus.bin),
            "--source-lang", corpus.source_lang, "--bpe-dir", str(corpus.bpe)]
    sentence: Optional[str] = inspect_sentence(corpus.tests[0]) if corpus.tests else None
    if sentence:
        args += ["--sentence", sentence]
    failure: Optional[SystemExit] = None
    with open(log, "w", encoding="utf-8") as f, logged_to(f):
        try:
            inspect_main(args)
        except SystemExit as e:  # posenc-inspect's own error, with what to do
            failure = e
    if not (target / "index.html").exists():
        tail = "\n".join(read_lines(log)[-10:])
        raise SystemExit(f"posenc-inspect failed for {run.label}: {failure or ''} "
                         f"(log: {log})\n{tail}")
