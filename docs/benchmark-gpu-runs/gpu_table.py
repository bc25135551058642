"""The GPU table of README.md and docs/performance.md, from the merged records.

    python docs/benchmark-gpu-runs/gpu_table.py [docs/benchmark-gpu.json]

prints the Markdown table: per encoding (or group of encodings with the same figures'
meaning), training fp16 at 128 / 512 tokens without and with attention dropout 0.1, bf16,
beam-10 translation, peak memory, the targets, what bounds an unmet target (``BOUNDS``,
written from the measurements in docs/decisions.md and docs/performance.md) and the commits
each figure was measured at. A figure measured before a later change of the code it ran
(``CHANGED``) is marked ``*``; the table's notes say what changed.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

ROWS = [  # (encodings shown in one row, in the README too)
    (("stock (noise control)",), True),
    (("sinusoidal", "learned", "none", "shape"), True),
    (("t5_nob",), True), (("at5",), True), (("at5_nob",), True), (("t5",), True),
    (("diet_rel",), True), (("kerple_log",), True), (("kerple_power",), True),
    (("alibi",), True), (("sandwich",), True), (("diet_abs",), True), (("tupe_a",), True),
    (("tupe_r",), True), (("rope",), True), (("xpos",), True), (("huang1",), True),
    (("huang2",), True), (("shaw",), True), (("xl",), True), (("huang4",), True),
    (("diet_abs_lin",), False), (("fire",), False), (("cope",), False), (("huang3",), False),
]

BOUNDS = {
    "at5_nob": "translation within its noise (0.15)",
    "t5": "the Triton FlashAttention: 1.8x cuDNN's time per call with a fixed table, its "
          "dropout 2x cuDNN's; the table's gradient",
    "diet_rel": "as `t5`",
    "kerple_log": "as `t5` (a learned table by distance, two parameters per head)",
    "kerple_power": "as `kerple_log`",
    "alibi": "encoder beyond 256 tokens: the Triton FlashAttention (as `t5`); decoder: the "
             "same beyond 128 tokens or with dropout, else 8 extra q/k dimensions",
    "sandwich": "as `alibi`'s encoder, in both stacks; translation: within its noise "
                "(0.15) of `kerple_log`'s, whose step path it shares",
    "diet_abs": "attention at head dimension 128 (the low-rank term's dimensions)",
    "tupe_a": "as `diet_abs`",
    "tupe_r": "the Triton kernel at head dimension 128",
    "rope": "the rotation's launches, forward and backward; translation within its noise",
    "xpos": "as `rope`, and the decay's scaling of `q` and `k`",
    "shaw": "the kernel's sums by clipped distance (it spills registers)",
    "xl": "the products that make the tables per row, `q + u` and `q + v`",
    "huang4": "as `xl`, and its key side's stores along the queries",
    "diet_abs_lin": "no speed target",
    "fire": "no speed target; its `(B, H, len, len)` bias and gradient through SDPA's mask",
    "cope": "no speed target; its gates and counts per pair, written out",
    "huang3": "its `len^2 x d_h` tensor, by design",
}

#: (encoding, column key) -> why the figure predates the code: marked ``*``
CHANGED = {
    **{("alibi", k): "causal ALiBi: `auto` now takes the fused kernel in the decoder here"
       for k in (("train", 512, "float16", 0.0), ("train", 512, "bfloat16", 0.0),
                 ("train", 512, "float16", 0.1))},
    ("alibi", ("train", 128, "float16", 0.1)): "fixed table: `auto` now takes SDPA in the "
                                               "encoder, the fused kernel in the decoder",
    ("sandwich", ("train", 128, "float16", 0.1)): "fixed table: `auto` now takes SDPA here",
}


def load(path):
    records = json.load(open(path))["results"]
    by = defaultdict(dict)
    for r in records:
        key = (r["length"], r["dtype"], r.get("attention_dropout") or 0.0)
        by[r["encoding"]][key] = r
    return by


def cell(by, names, kind, length, dtype, dropout, commits):
    values = []
    for name in names:
        r = by.get(name, {}).get((length, dtype, dropout))
        field = {"train": "train_ratio", "transl": "translate_ratio", "mem": "memory_ratio"}[kind]
        if r is None or r.get(field) is None:
            oom = r is not None and r.get("out_of_memory") is True and kind != "transl"
            values.append("out of memory" if oom else None)
            if oom:
                commits[r.get("commit", "")[:7]] = None
            continue
        values.append(r[field])
        commit = r.get("measured", {}).get(field, r.get("commit", ""))[:7]
        key = "transl" if kind == "transl" else (kind, length, dtype, dropout)
        mark = "*" if (name, key) in CHANGED else ""
        commits[commit + mark] = None
        if mark:
            values[-1] = (r[field], "*")
    shown = [v for v in values if v is not None]
    if not shown:
        return "-"
    if any(v == "out of memory" for v in shown):
        return "out of memory"
    star = "*" if any(isinstance(v, tuple) for v in shown) else ""
    nums = [v[0] if isinstance(v, tuple) else v for v in shown]
    fmt = (lambda x: f"{x:.1f}") if max(nums) >= 10 else (lambda x: f"{x:.2f}")
    lo, hi = min(nums), max(nums)
    return (fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi)}") + star


def pair(by, names, kind, dtype, dropout, commits):
    a = cell(by, names, kind, 128, dtype, dropout, commits)
    b = cell(by, names, kind, 512, dtype, dropout, commits)
    return "-" if a == b == "-" else f"{a} / {b}"


def target(names):
    """``train / transl / mem`` from posenc-benchmark's CUDA targets."""
    from fairseq_posenc.tools.benchmark.settings import CUDA_TARGETS, memory_limit

    speed = CUDA_TARGETS.get(names[0])
    memory = memory_limit(names[0], "cuda")
    if speed is None and memory is None:
        return "-"
    train, transl = (f"{x:.2f}" for x in speed) if speed else ("-", "-")
    return f"{train} / {transl} / " + (f"{memory:.2f}" if memory else "-")


def table(path, readme=False):
    by = load(path)
    head = ("| encoding | train fp16 128 / 512 | with attention dropout 0.1 | train bf16 128 / 512 "
            "| translate fp16 | peak mem 128 / 512 | target train / transl / mem "
            "| what bounds an unmet target | commits (H100) |")
    lines = [head, "|" + "---|" * 9]
    for names, in_readme in ROWS:
        if readme and not in_readme:
            continue
        commits = {}
        stock = names[0].startswith("stock")
        cols = [pair(by, names, "train", "float16", 0.0, commits),
                pair(by, names, "train", "float16", 0.1, commits),
                pair(by, names, "train", "bfloat16", 0.0, commits),
                cell(by, names, "transl", 128, "float16", 0.0, commits),
                pair(by, names, "mem", "float16", 0.0, commits),
                "-" if stock else target(names)]
        stock = names[0].startswith("stock")
        bound = "-" if stock else BOUNDS.get(names[0], "met")
        label = ", ".join(f"`{n}`" if not n.startswith("stock") else n for n in names)
        lines.append(f"| {label} | " + " | ".join(cols)
                     + f" | {bound} | {', '.join(sorted(commits))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--readme"]
    print(table(args[0] if args else "docs/benchmark-gpu.json", readme="--readme" in sys.argv))
