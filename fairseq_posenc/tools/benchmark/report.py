"""The report: one renderer per Markdown table shape, the whole document, the flat JSON.

Every renderer reads only the run's JSON records (:mod:`.records`), so ``--render`` lays
out an earlier run's results again. The tables: the model level's per configuration
(:func:`model_table`), the layer level's (:func:`layer_table`), the rest level's
(:func:`rest_table`) and the summary over every configuration (:func:`summary_table`).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from .parts import FROM_PARTS_FORMULA
from .records import Document, LayerResult, ModelResult, RestResult
from .settings import CONTROL, KINDS, LAYER_KINDS, REST_KINDS, SHORT, STOCK


def label(name: str) -> str:
    """A model's name in the tables: the noise control says what it is."""
    return f"{STOCK} (2nd copy: noise control)" if name == CONTROL else name


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines: header, separator, one line per row of cells."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(cells) + " |" for cells in rows)]


def dtype_note(result: Mapping[str, Any]) -> str:
    """``, float16`` for half-precision runs (nothing for float32, as before --dtype), and
    the attention dropout where there is one."""
    dtype = result.get("dtype", "float32")
    dropout = result["model"].get("attention_dropout")
    return (("" if dtype == "float32" else f", {dtype}")
            + (f", attention dropout {dropout:g}" if dropout else ""))


def fmt_ratio(cell: Mapping[str, float]) -> str:
    """Median (min-max)."""
    return f"{cell['ratio']:.3f} ({cell['min']:.2f}-{cell['max']:.2f})"


def fmt_iqr(cell: Mapping[str, float]) -> str:
    """Median (interquartile range)."""
    return f"{cell['ratio']:.3f} ({cell['q1']:.2f}-{cell['q3']:.2f})"


def verdict_text(name: str, checks: Mapping[str, Any],
                 from_parts: Optional[Mapping[str, float]] = None) -> str:
    """A model's target cell at one configuration: each target's PASS/FAIL by the median
    (``*``: not conclusive), the from-parts verdict where the median fails, and memory."""
    parts = []
    for kind in ("train", "translate"):
        if kind in checks:
            c = checks[kind]
            mark = "" if c["conclusive"] else "*"
            text = f"{SHORT[kind]} <= {c['limit']:.2f} {'PASS' if c['pass'] else 'FAIL'}{mark}"
            if (from_parts is not None and not c["pass"] and kind in from_parts
                    and from_parts[kind] <= c["limit"]):
                text += " (parts PASS)"
            parts.append(text)
    peak = checks.get("peak_memory")
    if peak is not None:
        parts.append(f"mem <= {peak['limit']:.2f} {'PASS' if peak['pass'] else 'FAIL'}")
    mem = checks.get("memory")
    if mem is not None and (not mem["pass"] or mem["expected_quadratic"]):
        parts.append(f"memory {'PASS' if mem['pass'] else 'FAIL'}")
    if not parts:
        return "- (no target)"
    return "; ".join(parts)


def _ms(stock_seconds: Mapping[str, float], kind: str) -> str:
    """Stock's median time of a call in ms, or "not timed" (``--calls``)."""
    return (f"{1000 * stock_seconds[kind]:.0f} ms" if kind in stock_seconds
            else "not timed")


def model_table(result: ModelResult) -> str:
    s = result["summary"]
    st = s["stock_seconds"]
    lines = [
        f"### {result['size']} ({result['model']['layers']}+{result['model']['layers']} layers, "
        f"{result['model']['dim']} wide, {result['model']['heads']} heads), source length "
        f"{result['length']}" + dtype_note(result),
        "",
        f"Stock fairseq: train {_ms(st, 'train')}/step ({result['batch_sentences']} "
        f"sentences), forward {_ms(st, 'forward')}, translate "
        f"{_ms(st, 'translate')} ({result['translate_sentences']} sentences, beam "
        f"{result['beam']}, {result['length'] + 1} steps); identical stock calls varied by "
        + " / ".join(f"x{s['stock_spread'][k]:.2f}" if k in st else "-" for k in KINDS)
        + " (max/min, train / forward / translate)"
        + ("" if result.get("other_processes_cores") is None else
           f"; other processes used {result['other_processes_cores']:.2f} cores meanwhile")
        + f". Ratios: median over {result['reps']} "
        f"repetitions (min-max), each against the stock calls just before and after; the "
        f"noise-control row times a second, identical stock model the same way."
        + (" A proxy size: the host's work per call (Python, dispatch, kernel launches), "
           "which bounds beam search on a GPU; no verdicts." if result["model"].get("proxy")
           else ""),
        "",
    ]
    rows = []
    for name, row in s["models"].items():
        if name == STOCK:
            continue
        rel = max(row["largest_rel"].values())
        parts = row.get("from_parts")
        rows.append([
            label(name), *(fmt_ratio(row[k]) if k in row else "-" for k in KINDS),
            " / ".join(f"{row['peak_ratio'][k]:.2f}" if k in row else "-" for k in KINDS),
            (f"**{rel:.2f} len x len x d_h** ({', '.join(row['quadratic_dh'])})"
             if row["quadratic_dh"] and not result["model"].get("proxy")
             else f"{rel:.3f} (stock's as large: no verdict)"
             if row.get("quadratic_visible", True) == [] else f"{rel:.3f}"),
            "-" if parts is None else " / ".join(f"{parts[k]:.3f}" if k in parts else "-"
                                                 for k in LAYER_KINDS),
            verdict_text(name, row["verdict"], parts)])
    oom = result.get("out_of_memory") or []
    if oom:
        rows.append([f"{', '.join(oom)}: out of memory (left out)", *["-"] * 7])
    return "\n".join(lines + table(
        ["encoding", "train", "forward", "translate", "peak mem train / fwd / transl",
         "largest tensor / (B H len^2 d_h)", "from parts: train / transl", "target"], rows))


def layer_table(result: LayerResult) -> str:
    s = result["summary"]
    st = s["stock_seconds"]
    m = result["model"]
    decoder_only = result.get("stacks") == "decoder"
    timed = "decoder self-attention alone" if decoder_only else (
        "encoder and decoder self-attention")
    encoded = "" if decoder_only else (
        f"encoder layer forward on {result['translate_sentences']} sentences, ")
    lines = [
        f"### Self-attention layer ({m['dim']} wide, {m['heads']} heads), length "
        f"{result['length']}" + dtype_note(result),
        "",
        f"Stock fairseq `MultiheadAttention`: train {1000 * st['train']:.1f} ms for the first "
        f"layer, {1000 * (st['train_2'] - st['train']):.1f} ms for the second ({timed}, "
        f"forward + backward + Adam step over the layers' and their encoding's parameters, "
        f"{result['batch_sentences']} sentences); translate {1000 * st['translate']:.1f} ms "
        f"and {1000 * (st['translate_2'] - st['translate']):.1f} ms ({encoded}decoder layer "
        f"over {result['length'] + 1} incremental steps of {result['decode_rows']} rows). First layer: median ratio over "
        f"{result['reps']} repetitions (interquartile range), each against the stock calls "
        "just before and after; later layers: the second layer's, from the first two timed "
        "in a row (the first computes the terms a stack shares). A model-level target holds "
        "if both are within it: the rest of the model is identical.",
        "",
    ]
    rows = []
    for name, row in s["models"].items():
        bound = row.get("bound")
        rows.append([
            label(name),
            *(fmt_iqr(c) for k in LAYER_KINDS
              for c in (row[k], row["later"][k])),
            "- (no target)" if bound is None else "; ".join(
                f"{SHORT[k]} <= {b['limit']:.2f} {'holds' if b['holds'] else 'not shown'}"
                for k, b in bound.items())])
    return "\n".join(lines + table(
        ["encoding", "train: first layer", "train: later layers", "translate: first layer",
         "translate: later layers", "model-level target, bounded by the layers"], rows))


def rest_table(result: RestResult) -> str:
    st = result["summary"]["stock_seconds"]
    lines = [
        f"### Everything but the layers ({result['model']['dim']} wide, 0 layers), length "
        f"{result['length']}" + dtype_note(result),
        "",
        f"Stock fairseq with 0 layers per stack: train {1000 * st['train']:.0f} ms/step "
        f"({result['batch_sentences']} sentences), translate {1000 * st['translate']:.0f} ms "
        f"({result['translate_sentences']} sentences, beam {result['beam']}, "
        f"{result['length'] + 1} steps). Ratios: median over {result['reps']} repetitions "
        "(interquartile range), each against the stock calls just before and after.",
        "",
    ]
    rows = [[label(name), *(fmt_iqr(row[k]) for k in REST_KINDS)]
            for name, row in result["summary"]["models"].items()]
    return "\n".join(lines + table(["encoding", "train", "translate"], rows))


def summary_table(doc: Document) -> str:
    """One row per encoding over every size and length: its targets, the model ratio its
    measured parts account for (the worst configuration), the verdict, the range of the
    directly measured model medians, and the layer and rest ratios per length."""
    results, layer_results = doc["results"], doc.get("layer_results", [])
    rest_results = doc.get("rest_results", [])
    if not results:
        return ""
    n = len(results)
    lines = [
        "### Summary over the configurations",
        "",
        f"*from parts*: the largest over the {n} configurations; *measured*: the range of "
        f"the {n} model-level medians; *layers*: first / later self-attention layers' "
        "ratios; *rest*: the 0-layer model's. Verdicts use *from parts* (the parts it "
        "counts in brackets) where every configuration has it, else the measured medians "
        "(`*`: some repetitions on the other side of the limit).",
        "",
    ]
    targets = {name: (t["train"], t["translate"]) for name, t in doc["targets"].items()}
    names = [CONTROL, *sorted(doc["encodings"], key=lambda e: (e not in targets, e))]
    table_rows = []
    for name in names:
        rows = [r["summary"]["models"][name] for r in results if name in r["summary"]["models"]]
        if not rows:
            continue
        limits = targets.get(name)
        from_parts = ([row["from_parts"] for row in rows]
                      if all("from_parts" in row for row in rows) else None)
        worst = (None if from_parts is None  # the calls the model level timed (--calls)
                 else {k: max(f[k] for f in from_parts) for k in LAYER_KINDS
                       if all(k in f for f in from_parts)})
        parts = (None if from_parts is None else
                 " + ".join(dict.fromkeys(p for row in rows for p in row["from_parts_of"])))
        verdicts = []
        for kind, limit in zip(LAYER_KINDS, limits or ()):
            if worst is not None and kind in worst:
                ok = worst[kind] <= limit
                verdicts.append(f"{SHORT[kind]} {'PASS' if ok else 'FAIL'} ({parts})")
                continue
            checks = [row["verdict"][kind] for row in rows if kind in row["verdict"]]
            if not checks:
                continue  # not timed (--calls)
            failed = [c for c in checks if not c["pass"]]
            mark = "*" if failed and not any(c["conclusive"] for c in failed) else ""
            verdicts.append(f"{SHORT[kind]} {'FAIL' if failed else 'PASS'}{mark} "
                            f"({len(checks) - len(failed)}/{len(checks)} medians)")
        measured = [f"{min(row[k]['ratio'] for row in rows if k in row):.2f}-"
                    f"{max(row[k]['ratio'] for row in rows if k in row):.2f}"
                    if any(k in row for row in rows) else "-" for k in LAYER_KINDS]
        level_cells = []
        for layer in layer_results:
            layer_row = layer["summary"]["models"].get(name)
            level_cells.append("stock layers" if layer_row is None else "; ".join(
                f"{layer_row[k]['ratio']:.2f} / {layer_row['later'][k]['ratio']:.2f}"
                for k in LAYER_KINDS))
        for rest in rest_results:
            rest_row = rest["summary"]["models"][name]
            level_cells.append(" / ".join(f"{rest_row[k]['ratio']:.3f}" for k in REST_KINDS))
        table_rows.append([
            label(name),
            "-" if limits is None else f"{limits[0]:.2f} / {limits[1]:.2f}",
            "-" if worst is None else " / ".join(
                f"{worst[k]:.3f}" if k in worst else "-" for k in LAYER_KINDS),
            "; ".join(verdicts) or "- (no target)", *measured, *level_cells])
    columns = ["encoding", "target: train / transl", "from parts: train / transl", "verdict",
               "measured: train", "measured: transl",
               *(f"layers, len {r['length']}: train; transl" for r in layer_results),
               *(f"rest, len {r['length']}: train / transl" for r in rest_results)]
    return "\n".join(lines + table(columns, table_rows))


def markdown_document(doc: Document) -> str:
    """The whole report: machine and command, how to read it, the summary, then every
    configuration's tables and the targets failed."""
    m = doc["machine"]
    head = [
        "## Position-encoding benchmark: ratio to stock fairseq `transformer`",
        "",
        f"Machine: {m['cpu']}, {m['usable_cores']} cores, torch {m['torch']} "
        f"({m['torch_threads']} threads), fairseq {m.get('fairseq', '?')}, device "
        f"`{m['device']}`{' (' + m['gpu'] + ')' if 'gpu' in m else ''}. "
        f"Wall time {doc['wall_seconds'] / 60:.1f} min.",
        "",
        f"Command: `{' '.join(doc['command']) if doc['command'] else 'run(...)'}`",
        "",
        "Ratios < 1 are faster than stock. Peak memory: live bytes allocated during the call "
        "over stock's. Largest tensor: the largest activation over `B * H * len^2 * d_h` "
        "(>= 1: a len x len x d_h tensor per head and sentence). Target verdicts use the "
        "median; `*`: the repetitions fall on both sides of the limit (not conclusive). "
        "Parts, each timed against stock's with many more repetitions: the first encoder "
        "and decoder self-attention layer of each model and the first two in a row (layer "
        "tables), and the model with 0 layers (rest tables). A model is its layers and the "
        "rest, its layers differ from stock's only in self-attention, and layers 2..L of a "
        f"stack do the second layer's work, so its ratio is `{FROM_PARTS_FORMULA}` (the "
        "rest's, first and later layers' ratios `r`, stock's times `S` of those parts and "
        "`t_model` of the model, `L` layers per stack): the *from parts* column, resolved to "
        "about a percent where the direct model ratio is not; *(parts PASS)*: the target "
        "holds by it.",
        "",
    ]
    summary = summary_table(doc)
    body = "\n\n".join(([summary] if summary else [])
                       + [model_table(r) for r in doc["results"]]
                       + [layer_table(r) for r in doc.get("layer_results", [])]
                       + [rest_table(r) for r in doc.get("rest_results", [])])
    fails = doc["failures"]
    tail = ["", "", "**Targets failed:** " + ("none" if not fails else "")]
    tail += [f"- {f}" for f in fails]
    return "\n".join(head) + "\n" + body + "\n".join(tail)


def flat_results(doc: Document) -> dict[str, Any]:
    """One record per (encoding, size, length, dtype) of the model level: the median
    ratios to stock of a training step, of beam translation and of the training step's
    peak memory (``docs/benchmark-gpu.json``), each with the run's attention dropout,
    device and git commit."""
    m = doc["machine"]
    device, commit = m.get("gpu", m["device"]), m.get("git_commit")
    records = []
    for result in doc["results"]:
        for name, row in result["summary"]["models"].items():
            if name == STOCK:
                continue
            records.append({
                "encoding": "stock (noise control)" if name == CONTROL else name,
                "size": result["size"], "length": result["length"],
                "dtype": result.get("dtype", "float32"),
                "attention_dropout": result["model"].get("attention_dropout", 0.0),
                "batch_sentences": result["batch_sentences"],
                # None: the call was not timed in this run (--calls)
                "train_ratio": row["train"]["ratio"] if "train" in row else None,
                "translate_ratio": row["translate"]["ratio"] if "translate" in row else None,
                "memory_ratio": row["peak_ratio"].get("train"),
                "device": device, "commit": commit,
            })
        for name in result.get("out_of_memory") or []:
            records.append({
                "encoding": name, "size": result["size"], "length": result["length"],
                "dtype": result.get("dtype", "float32"),
                "attention_dropout": result["model"].get("attention_dropout", 0.0),
                "batch_sentences": result["batch_sentences"], "train_ratio": None,
                "translate_ratio": None, "memory_ratio": None, "out_of_memory": True,
                "device": device, "commit": commit})
    return {"device": device, "torch": m["torch"], "command": doc["command"],
            "results": records}
