"""Helpers for the command-line tests (tests/integration/test_binaries.py and others).

In the style of fairseq's own ``tests/utils.py``: make a tiny synthetic parallel corpus,
binarize it, train, generate and translate interactively through fairseq's real entry
points (``fairseq_cli.*.main`` in-process with arguments parsed by ``fairseq.options``),
plus what a test needs to run the installed console scripts as subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO_ROOT / "fairseq_posenc")
BIN_DIR = Path(sys.executable).parent

SRC, TGT = "src", "tgt"

# --- data ---------------------------------------------------------------------------

#: Source vocabulary and the fixed word-for-word dictionary into the target language.
SRC_WORDS = [f"s{i}" for i in range(24)]
LEXICON = {w: f"T{(7 * i + 3) % len(SRC_WORDS)}" for i, w in enumerate(SRC_WORDS)}


def translate(words: Sequence[str]) -> list[str]:
    """The corpus's deterministic "translation": map every word, then reverse the order."""
    return [LEXICON[w] for w in reversed(words)]


def random_sentence(rng: random.Random, min_len: int = 3, max_len: int = 12) -> list[str]:
    return [rng.choice(SRC_WORDS) for _ in range(rng.randint(min_len, max_len))]


def create_parallel_corpus(
    raw_dir: str | os.PathLike,
    num_train: int = 300,
    num_valid: int = 30,
    num_test: int = 27,
    seed: int = 1,
) -> dict[str, int]:
    """Write ``{train,valid,test}.{src,tgt}`` (one sentence per line, 3-12 words).

    ``num_test`` defaults to 27, deliberately not a multiple of 8: fairseq's default
    ``--required-batch-size-multiple 8`` would silently drop test sentences.
    """
    rng = random.Random(seed)
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    sizes = {"train": num_train, "valid": num_valid, "test": num_test}
    for split, n in sizes.items():
        sources = [random_sentence(rng) for _ in range(n)]
        write_lines(raw_dir / f"{split}.{SRC}", (" ".join(s) for s in sources))
        write_lines(raw_dir / f"{split}.{TGT}", (" ".join(translate(s)) for s in sources))
    return sizes


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path: str | os.PathLike) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def preprocess_translation_data(raw_dir: str | os.PathLike, dest_dir: str | os.PathLike,
                                extra_flags: Optional[list[str]] = None) -> None:
    """``fairseq-preprocess`` with a joined dictionary, in-process."""
    from fairseq import options
    from fairseq_cli import preprocess

    raw_dir = str(raw_dir)
    parser = options.get_preprocessing_parser()
    args = parser.parse_args(
        [
            "--source-lang", SRC,
            "--target-lang", TGT,
            "--trainpref", os.path.join(raw_dir, "train"),
            "--validpref", os.path.join(raw_dir, "valid"),
            "--testpref", os.path.join(raw_dir, "test"),
            "--joined-dictionary",
            "--thresholdsrc", "0",
            "--thresholdtgt", "0",
            "--workers", "1",
            "--destdir", str(dest_dir),
        ]
        + (extra_flags or [])
    )
    preprocess.main(args)


# --- training and decoding, in-process ------------------------------------------------


def train_flags(data_dir: str | os.PathLike, save_dir: str | os.PathLike, arch: str,
                max_update: int = 8) -> list[str]:
    """Flags of a tiny, fast ``fairseq-train`` run (shared by in-process and subprocess runs)."""
    return [
        str(data_dir),
        "--user-dir", USER_DIR,
        "--task", "translation",
        "--source-lang", SRC,
        "--target-lang", TGT,
        "--arch", arch,
        "--save-dir", str(save_dir),
        "--optimizer", "adam",
        "--lr", "0.001",
        "--criterion", "label_smoothed_cross_entropy",
        "--label-smoothing", "0.1",
        "--max-tokens", "500",
        "--max-update", str(max_update),
        "--required-batch-size-multiple", "1",
        "--no-progress-bar",
        "--log-format", "simple",
        "--log-interval", "1",
        "--num-workers", "0",
        "--seed", "1",
        "--no-epoch-checkpoints",
    ]


def train_translation_model(data_dir: str | os.PathLike, save_dir: str | os.PathLike,
                            arch: str, max_update: int = 8,
                            extra_flags: Optional[list[str]] = None) -> None:
    """``fairseq-train``, in-process (``fairseq_cli.train.main``)."""
    from fairseq import options
    from fairseq_cli import train

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        train_flags(data_dir, save_dir, arch, max_update)
        + ["--distributed-world-size", "1"]
        + (extra_flags or []),
    )
    train.main(args)


def generate_flags(data_dir: str | os.PathLike, checkpoint: str | os.PathLike,
                   user_dir: bool = True, required_batch_size_multiple: Optional[int] = 1,
                   ) -> list[str]:
    """``fairseq-generate`` flags: beam 10, lenpen 0.6 over the whole test set.

    ``required_batch_size_multiple=None`` keeps fairseq's default (8), which silently
    drops the last batch when its size is not a multiple of 8 (docs/fairseq-notes.md).
    """
    multiple = ([] if required_batch_size_multiple is None
                else ["--required-batch-size-multiple", str(required_batch_size_multiple)])
    return (
        [str(data_dir), "--path", str(checkpoint)]
        + (["--user-dir", USER_DIR] if user_dir else [])
        + [
            "--task", "translation",
            "--source-lang", SRC,
            "--target-lang", TGT,
            "--gen-subset", "test",
            "--beam", "10",
            "--lenpen", "0.6",
            "--max-len-b", "10",
            "--batch-size", "8",
            "--no-progress-bar",
            "--num-workers", "0",
        ]
        + multiple
    )


def generate_main(data_dir: str | os.PathLike, checkpoint: str | os.PathLike,
                  extra_flags: Optional[list[str]] = None,
                  required_batch_size_multiple: Optional[int] = 1) -> str:
    """``fairseq-generate``, in-process; returns what it prints (S-/T-/H-/D-/P- lines)."""
    from fairseq import options
    from fairseq_cli import generate

    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(
        parser,
        generate_flags(data_dir, checkpoint,
                       required_batch_size_multiple=required_batch_size_multiple)
        + (extra_flags or []),
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        generate.main(args)
    return out.getvalue()


def interactive_main(data_dir: str | os.PathLike, checkpoint: str | os.PathLike,
                     input_lines: Sequence[str], work_dir: str | os.PathLike,
                     extra_flags: Optional[list[str]] = None) -> str:
    """``fairseq-interactive --input FILE``, in-process; returns what it prints."""
    from fairseq import options
    from fairseq_cli import interactive

    input_file = Path(work_dir) / "interactive.input"
    write_lines(input_file, input_lines)
    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(data_dir),
            "--path", str(checkpoint),
            "--user-dir", USER_DIR,
            "--task", "translation",
            "--source-lang", SRC,
            "--target-lang", TGT,
            "--input", str(input_file),
            "--beam", "10",
            "--lenpen", "0.6",
            "--max-len-b", "10",
            "--buffer-size", "4",
            "--batch-size", "4",
            "--required-batch-size-multiple", "1",
            "--no-progress-bar",
        ]
        + (extra_flags or []),
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        interactive.main(args)
    return out.getvalue()


def hypotheses(output: str, prefix: str = "H") -> dict[int, str]:
    """``{sentence id: text}`` of the ``H-`` (or ``D-``) lines of generate / interactive."""
    from fairseq_posenc.tools.hypotheses import parse

    return parse(output.splitlines(), prefix)


def score_bleu(hyps: Sequence[str], refs: Sequence[str]):
    """Corpus BLEU (sacreBLEU's default, cased) and its signature, as the tools score
    (``fairseq-score --sacrebleu`` is broken)."""
    from fairseq_posenc.tools.evaluation.scoring import bleu

    return bleu(hyps, refs, "cased", "de")  # the language matters only for "tokenized"


# --- subprocesses ---------------------------------------------------------------------


def console_script(name: str) -> str:
    """Path of an installed console script (``fairseq-train`` ...) of this interpreter."""
    path = BIN_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is fairseq installed in {BIN_DIR.parent}?")
    return str(path)


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)  # the plugin must make loading work
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_script(name: str, argv: Sequence[str], timeout: float = 180,
               env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run an installed console script (``env`` adds variables); returns the finished
    process with its text output."""
    return subprocess.run(
        [console_script(name)] + [str(a) for a in argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        env={**subprocess_env(), **(env or {})},
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def train_distributed(jobs: Sequence[tuple[str, list[str]]], log_dir: str | os.PathLike,
                      world_size: int = 2, timeout: float = 900,
                      ) -> list[tuple[int, dict[str, str]]]:
    """Run ``jobs`` (``(name, fairseq-train args)``) one after another, each on
    ``world_size`` CPU processes (gloo, started by hand: the only multi-process recipe that
    works on CPU with fairseq 0.12, docs/fairseq-notes.md). ``distributed_worker.py`` runs all
    jobs of a rank in one process, so the processes start once.

    Returns, per rank, the exit code and each job's output (``{name: log}``); kills every
    rank on timeout.
    """
    spec_path = Path(log_dir) / "jobs.json"
    spec_path.write_text(json.dumps({"world_size": world_size, "port": free_port(),
                                     "jobs": [[n, list(map(str, a))] for n, a in jobs]}))
    worker = str(Path(__file__).resolve().parent / "distributed_worker.py")
    procs, logs = [], []
    try:
        for rank in range(world_size):
            log_path = Path(log_dir) / f"train.rank{rank}.log"
            log = open(log_path, "w", encoding="utf-8")
            logs.append((log, log_path))
            procs.append(subprocess.Popen(
                [sys.executable, worker, str(spec_path), str(rank)],
                stdout=log, stderr=subprocess.STDOUT, text=True, env=subprocess_env(),
            ))
        codes = [proc.wait(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log, _ in logs:
            log.close()
    results = []
    for code, (_, path) in zip(codes, logs):
        parts = Path(path).read_text(encoding="utf-8").split("=== JOB ")[1:]
        results.append((code, {part.split("\n", 1)[0]: part for part in parts}))
    return results
