"""Shell scripts that reproduce each table, generated from the recipes (``recipes.py``).

``examples/wmt/<paper>_table.sh`` shows a reader the real commands: ``posenc-prepare-wmt``
per dataset, every ``fairseq-train`` of the table with the paper's flags (one GPU; the
``--update-freq`` reaches the paper's batch; ``--seeds N`` trains seeds 1..N), then
``posenc-reproduce evaluate`` and
``table``, with the ``fairseq-generate`` command that evaluation runs for each cell written
beside it. ``posenc-reproduce scripts --out examples/wmt`` writes them;
``tests/tools/test_wmt_reproduce.py`` fails when a checked-in script drifts from the recipes.

Paths are shell variables (``$DATA``, ``$WORK``, ``$USER_DIR``), so a script is the same on
every machine.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Sequence

from .catalog import DATASETS
from .execute import evaluated_checkpoint
from .recipes import PAPERS, Paper
from .runs import USER_DIR, Scale, generate_args, select, train_args, trainings

#: Placeholders for the paths, replaced by shell variables in the script.
DATA, WORK = Path("/DATA"), Path("/WORK")
VARIABLES = {str(USER_DIR): "$USER_DIR", str(DATA): "$DATA", str(WORK): "$WORK"}
#: The seed of a training and the suffix of its directories (none for seed 1, as
#: :attr:`Run.seed_suffix`), set by the script's loop over ``--seeds``.
SEED, SUFFIX = "@SEED@", "@SUFFIX@"


def shell_word(arg: str) -> str:
    """``arg`` quoted for bash, its placeholders as (double-quoted) variables."""
    if arg == SEED:
        return '"$SEED"'
    for path, variable in VARIABLES.items():
        if arg.startswith(path):
            rest = arg[len(path):].replace(SUFFIX, "$SUFFIX")
            if any(c in rest.replace("$SUFFIX", "") for c in '"$`\\'):
                raise ValueError(f"cannot write {arg!r} inside double quotes")
            return f'"{variable}{rest}"'
    return shlex.quote(arg)


def seeded(args: list[str]) -> list[str]:
    """``fairseq-train`` arguments of seed 1 with the script's seed and suffix instead."""
    args = list(args)
    args[args.index("--seed") + 1] = SEED
    args[args.index("--save-dir") + 1] += SUFFIX
    return args


def command(tool: str, args: Sequence[str], prefix: str = "") -> list[str]:
    """One command, one flag (with its value) per line."""
    lines, current = [], f"{prefix}{tool}"
    for arg in map(shell_word, args):
        if arg.startswith("-") and not arg.lstrip("-").replace(".", "").isdigit():
            lines.append(current + " \\")
            current = f"{prefix}  {arg}"
        else:
            current += f" {arg}"
    return lines + [current]


def script(paper: Paper) -> str:
    runs = select(paper.key)
    datasets = sorted({run.column.dataset for run in runs})
    out = [
        "#!/usr/bin/env bash",
        f"# {paper.title}",
        "#",
        "# Generated from fairseq_posenc/tools/wmt/recipes.py by `posenc-reproduce scripts --out "
        "examples/wmt`;",
        "# do not edit (tests/tools/test_wmt_reproduce.py fails when this file drifts from "
        "the recipes).",
        "# One GPU per run; `posenc-reproduce commands --paper "
        f"{paper.key} --gpus N` prints them for N GPUs.",
        "set -euo pipefail",
        "SEEDS=1   # --seeds N: train and evaluate seeds 1..N of every cell "
        "(mean ± std in the table)",
        "while [ $# -gt 0 ]; do",
        '  case "$1" in',
        '    --seeds) SEEDS="$2"; shift 2 ;;',
        '    *) echo "usage: $0 [--seeds N]" >&2; exit 2 ;;',
        "  esac",
        "done",
        'DATA="${DATA:-data/wmt}"   # prepared datasets',
        'WORK="${WORK:-work/wmt}"   # checkpoints/ and results/',
        "USER_DIR=\"$(python -c 'import fairseq_posenc, os; "
        "print(os.path.dirname(fairseq_posenc.__file__))')\"",
        "",
        "# 1. data",
        *[f'posenc-prepare-wmt {d} --dest "$DATA/{d}"' for d in datasets],
        "",
        "# 2. training: one model per row, dataset direction and seed",
        'for SEED in $(seq 1 "$SEEDS"); do',
        '  SUFFIX=""; [ "$SEED" = 1 ] || SUFFIX=".seed$SEED"   # seed 1 keeps the plain paths',
    ]
    for run in trainings(runs):
        out += ["", f"  # {run.row.label} (--pos-encoding {run.row.encoding}), "
                    f"{run.column.dataset} {run.pair}"]
        out += command("fairseq-train", seeded(train_args(run, DATA, WORK, Scale())),
                       prefix="  ")
    out += ["done"]
    out += ["", f"# 3. translate and score every cell: {evaluated_checkpoint(paper)} of each "
                "model, every test sentence, detokenized,",
            "#    BLEU as the paper computed it, chrF, length buckets. For each cell (seed 1) "
            "it runs",
            "#    (and, where a model cannot represent a source, the flags that skip it and "
            "say so):"]
    for run in runs:  # the data as posenc-prepare-wmt makes it by default (subword-nmt)
        split = DATASETS[run.column.dataset].test_splits[run.column.testset]
        checkpoint = run.save_dir(WORK) / evaluated_checkpoint(paper)
        results = run.result_path(WORK).parent / f"generate.{run.column.testset}"
        out += ["#", f"#   {run.row.label}, {run.column.label}:"]
        out += command("fairseq-generate", generate_args(
            run, DATA, checkpoint, split, results, "subword-nmt"), prefix="#   ")
    out += [f'posenc-reproduce evaluate --paper {paper.key} --data "$DATA" --work "$WORK" '
            '--seeds "$SEEDS"',
            "",
            "# 4. the table: paper / ours / diff, chrF, p against the baseline, length buckets",
            f'posenc-reproduce table --paper {paper.key} --work "$WORK"', ""]
    return "\n".join(out)


def script_path(dest: Path, paper: Paper) -> Path:
    return dest / f"{paper.key}_table.sh"


def write_scripts(dest: Path) -> list[Path]:
    written = []
    for paper in PAPERS.values():
        path = script_path(dest, paper)
        path.write_text(script(paper))
        path.chmod(0o755)
        written.append(path)
    return written
