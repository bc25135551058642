"""Several runs as one report: ``docs/benchmark-gpu.json`` and ``docs/benchmark-gpu.md``.

The GPU configuration (``settings.CUDA_DEFAULTS``: base model, fp16 and bf16, 128 and 512
tokens, training and beam-10 translation, with and without attention dropout) is too long
for one command on a time-limited GPU machine, so it is measured in several runs, each
timing stock itself (its ratios are valid alone). ``posenc-benchmark --merge RUN.json ...``
combines their flat records (:func:`merge_flat`): one record per (encoding, size, length,
dtype, attention dropout), a later run's measured values replacing an earlier one's (a
re-measure after a fix), values a run did not time (``None``, ``--calls``) leaving the
earlier ones. Every record names the device and the commit of the run behind each of its
figures (``measured``). The Markdown leads with one row per encoding against the GPU
targets (:func:`gpu_summary_table`), then every run's own report.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .records import Document
from .report import flat_results, markdown_document, table
from .settings import CUDA_TARGETS, memory_limit

RATIOS = ("train_ratio", "translate_ratio", "memory_ratio")
CONTROL_LABEL = "stock (noise control)"


def merge_flat(flats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The runs' flat records merged, in the runs' order (see the module docstring)."""
    if not flats:
        raise ValueError("--merge needs at least one run's --out-json file")
    devices = {f["device"] for f in flats}
    if len(devices) > 1:
        raise ValueError(f"runs from different devices cannot be merged: {sorted(devices)}")
    merged: dict[tuple, dict[str, Any]] = {}
    for flat in flats:
        for record in flat["results"]:
            dropout = record.get("attention_dropout", 0.0)
            key = (record["encoding"], record["size"], record["length"], record["dtype"],
                   dropout)
            into = merged.setdefault(key, {k: v for k, v in record.items() if k not in RATIOS}
                                     | {k: None for k in RATIOS}
                                     | {"attention_dropout": dropout, "measured": {}})
            for k in RATIOS:
                if record.get(k) is not None:
                    into[k] = record[k]
                    into["measured"][k] = record.get("commit")
            if record.get("out_of_memory"):
                into["out_of_memory"] = True
            # the row's device and commit: the latest run that measured any of its figures
            into["device"] = record.get("device", flat["device"])
            into["commit"] = record.get("commit")
    return {"device": flats[0]["device"], "torch": flats[0]["torch"],
            "commands": [f["command"] for f in flats], "results": list(merged.values())}


def _cell(record: Optional[dict[str, Any]], key: str) -> str:
    if record is None:
        return "-"
    if record.get("out_of_memory"):
        return "out of memory"
    value = record.get(key)
    return "-" if value is None else f"{value:.2f}"


def _status(name: str, records: list[dict[str, Any]]) -> str:
    """Which targets the measured medians meet, and the worst miss of each kind."""
    limits = CUDA_TARGETS.get(name)
    peak = memory_limit(name, "cuda")
    misses = []
    checks = 0
    for key, limit in (("train_ratio", limits and limits[0]), ("translate_ratio",
                                                                 limits and limits[1]),
                       ("memory_ratio", peak)):
        if limit is None:
            continue
        measured = [r for r in records if r.get(key) is not None]
        checks += len(measured)
        worst = max(measured, key=lambda r: r[key], default=None)
        if worst is not None and worst[key] > limit:
            what = {"train_ratio": "train", "translate_ratio": "transl",
                    "memory_ratio": "mem"}[key]
            misses.append(f"{what} {worst[key]:.3f} > {limit:.2f} "
                          f"({_config_name(_config(worst))})")
    if not checks:
        return "- (no target)"
    return "met" if not misses else "not met: " + "; ".join(misses)


def _config_name(config: tuple) -> str:
    length, dtype, dropout = config
    return f"{length} {dtype}" + (f" dropout {dropout:g}" if dropout else "")


def gpu_summary_table(flat: dict[str, Any]) -> str:
    """One row per encoding: training at each length, dtype and attention dropout,
    translation, peak memory of a training step, the targets
    (:data:`.settings.CUDA_TARGETS`) and where they stand."""
    records = flat["results"]
    configs = sorted({(r["length"], r["dtype"], r.get("attention_dropout", 0.0))
                      for r in records}, key=lambda c: (c[2], c[1] != "float16", c[0]))
    trained = [c for c in configs
               if any(r.get("train_ratio") is not None for r in records if _config(r) == c)]
    translated = [c for c in configs
                  if any(r.get("translate_ratio") is not None for r in records
                         if _config(r) == c)]
    names = list(dict.fromkeys(r["encoding"] for r in records))
    names = [CONTROL_LABEL] * (CONTROL_LABEL in names) + sorted(
        (n for n in names if n != CONTROL_LABEL), key=lambda n: (n not in CUDA_TARGETS, n))
    rows = []
    for name in names:
        mine = [r for r in records if r["encoding"] == name]
        at = {_config(r): r for r in mine}
        limits = CUDA_TARGETS.get(name)
        peak = memory_limit(name, "cuda") if name != CONTROL_LABEL else None
        rows.append([
            name,
            *(_cell(at.get(c), "train_ratio") for c in trained),
            *(_cell(at.get(c), "translate_ratio") for c in translated),
            *(_cell(at.get(c), "memory_ratio") for c in trained),
            ("-" if limits is None else f"{limits[0]:.2f} / {limits[1]:.2f}")
            + ("" if peak is None else f" / {peak:.2f}"),
            "-" if name == CONTROL_LABEL else _status(name, mine),
            ", ".join(sorted({(c or "?")[:7] for r in mine for c in r.get("measured", {
                "": r.get("commit")}).values()}))])
    columns = [
        "encoding",
        *(f"train {_config_name(c)}" for c in trained),
        *(f"transl {_config_name(c)}" for c in translated),
        *(f"peak mem {_config_name(c)}" for c in trained),
        "target: train / transl / mem", "status", "commits"]
    return "\n".join(table(columns, rows))


def _config(record: dict[str, Any]) -> tuple:
    return record["length"], record["dtype"], record.get("attention_dropout", 0.0)


def merged_document(docs: Sequence[Document]) -> tuple[str, dict[str, Any]]:
    """The merged Markdown (summary, then each run's report) and the merged flat JSON."""
    flat = merge_flat([flat_results(doc) for doc in docs])
    head = [
        "## Position encodings on a GPU: ratio to stock fairseq `transformer_wmt_en_de`",
        "",
        f"Device: {flat['device']}, torch {flat['torch']}. {len(docs)} runs, each timing "
        "stock itself, merged with `posenc-benchmark --merge` (a later run's figure "
        "replaces an earlier one's). Medians over the repetitions; the noise-control row "
        "is a second, identical stock model timed the same way. Memory: a training "
        "step's peak of allocated bytes over stock's. `commits`: the code each row's "
        "figures were measured at (`measured` in the JSON says which figure).",
        "",
        gpu_summary_table(flat),
        "",
        "Runs:",
        "",
        *(f"{i + 1}. `{' '.join(doc['command'] or [])}`" for i, doc in enumerate(docs)),
    ]
    body = [f"# Run {i + 1}\n\n" + doc.get("markdown", markdown_document(doc))
            for i, doc in enumerate(docs)]
    return "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n", flat
