"""``report.md`` and ``report/index.html`` from ``report.json``: one document, two renderings.

The document is a list of blocks (headings, paragraphs, tables, pictures, links) built once
(:func:`document`); :func:`markdown` and :func:`html` render it. The HTML page carries its
pictures inline (base64), so it reads offline and can be mailed or attached to a review as
one file; it links to each encoding's ``posenc-inspect`` pages beside it.

The report says each thing once: what the columns, the cells of the tables by length and
the marker ``†`` mean stands in one section, "How to read" (:func:`how_to_read`), before the
first table, and each table ends with a line that links to it (:func:`pointer`). It is
titled by the name of the data's directory; its full path is in the settings paragraph.
"""

from __future__ import annotations

import base64
import html as html_lib
import os
import re
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from ..evaluation.bins import is_few
from ..evaluation.buckets import FEW_NOTE, SHORT_NOTE, column, short
from ..evaluation.significance import MEANING
from ..textprep.files import write_text_atomic
from . import budget, convergence, extrapolation_study, init_from, plots

#: ("h1"/"h2"/"h3", text[, anchor]) | ("p", text) | ("table", header, rows) | ("img", path, alt)
#: | ("links", [(text, path)]); a text's ``[words](#anchor)`` links to the heading of that anchor.
Block = tuple

#: The anchor of the section "How to read": GitHub's for its heading, and the HTML page's id.
READ_ANCHOR = "how-to-read"


def _num(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mean_sd(mean: Optional[float], sd: Optional[float], n: int) -> str:
    if mean is None:
        return "-"
    return f"{mean:.2f}" if sd is None else f"{mean:.2f} ± {sd:.2f} (n={n})"


def _delta(row: dict, base: dict, key: str) -> Optional[float]:
    if row[key] is None or base[key] is None or row is base:
        return None
    return row[key] - base[key]


def _p(p: Optional[float], significant: Optional[bool], delta: Optional[float]) -> str:
    """The p-value, ``*`` where significant; equal scores say so (sacreBLEU's test gives
    them its smallest p, which would read as a difference)."""
    if p is None or delta is None:
        return "-"
    if round(delta, 2) == 0:
        return "same score"
    return f"{p:.3f}" + ("*" if significant else "")


def _signed(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _short(checkpoint: Optional[str]) -> str:
    """``ENC/seedK/checkpoints/NAME``: the checkpoint's path within ``OUT/runs``."""
    if not checkpoint:
        return "-"
    parts = Path(checkpoint).parts
    return "/".join(parts[-4:])


def _row(row: dict[str, Any]) -> str:
    """``t5 (encoder) / fox (decoder)``, and the row's own flags."""
    what = (f"{row['encoder']} (encoder) / {row['decoder']} (decoder)"
            if row["encoder"] != row["decoder"] else row["encoder"])
    return what + (f", `{' '.join(row['flags'])}`" if row["flags"] else "")


def _speed(report: dict[str, Any]) -> str:
    """How the runs were placed, or why the time per word is left out."""
    speed = report.get("speed")
    if not speed:  # a report.json written before the placement was recorded
        return "how the runs were placed was not recorded"
    return speed["placement"]


def _intro(report: dict[str, Any]) -> list[Block]:
    """The title (the data directory's name), the settings (its full path) and the data."""
    s = report["settings"]
    baseline = report["baseline"]
    stop = (f"{s['max_update']} updates" if s["max_update"] else f"{s['max_epoch']} epochs")
    if s.get("until_converged"):
        stop = (f"until its validation loss stops improving ({s['patience']} validations "
                f"without a new best, validating every {s['validate_every']} updates), at "
                f"most {s['max_update']} updates")
    seeds = f"{report['seeds']} seed" + ("s" if report["seeds"] > 1 else "")
    model = ("fine-tunes the checkpoint of `--init-from` (below) converted to its row's "
             "encoding," if s.get("init_from") else f"trains `{s['arch_prefix']}_ENCODING`")
    blocks: list[Block] = [
        ("h1", f"Position encodings on {Path(s['data']).name or s['data']}: "
               f"{s['source_lang']} → {s['target_lang']}"),
        ("p", f"{len(report['encodings'])} encodings × {seeds} on `{s['data']}`, baseline "
              f"`{baseline}`. Every run {model} "
              f"{stop if s.get('until_converged') else 'for ' + stop}"
              f"{budget.note(report)}{',' if s.get('until_converged') else ''} with "
              f"the same data, flags and seed k for its k-th run, evaluates the checkpoint "
              f"rule `{report['checkpoint_rule']}`, translates with {report['decoding']} and "
              f"is scored with {report['metric']} against the raw references."),
        *init_from.intro(report),
    ]
    defined = [(label, row) for label, row in (report.get("rows") or {}).items()
               if row["encoder"] != row["decoder"] or row["flags"] or row["encoder"] != label]
    if defined:
        blocks.append(("p", "Rows with an encoding per stack or options of their own: " + "; ".join(
            f"`{label}`: {_row(row)}" for label, row in defined) + ". A row of two encodings "
            f"trains `{'' if s.get('init_from') else s['arch_prefix'] + '_ENCODER '}"
            "--encoder-pos-encoding ENCODER --decoder-pos-encoding DECODER`; a row's flags "
            "come after every row's."))
    if s.get("user_dir"):
        blocks.append(("p", f"Every fairseq command ran with `--user-dir {s['user_dir']}`, "
                            "which registers the encodings not built into fairseq-posenc."))
    pairs, cleaning = report.get("pairs") or {}, report.get("cleaning")
    if pairs or cleaning:
        text = "Sentence pairs: " + ", ".join(f"{k} {v:,}" for k, v in pairs.items()) + "."
        if cleaning and "kept" in cleaning:  # raw data prepared here or by posenc-prepare-corpus
            dropped = "; ".join(f"{n:,}: {why}" for why, n in cleaning["dropped"].items())
            text += (f" Training pairs kept after cleaning: {cleaning['kept']:,} of "
                     f"{cleaning['read']:,} ({cleaning['rule'].get('rule', '')})"
                     + (f"; dropped {dropped}." if dropped else "; none dropped."))
        blocks.append(("p", text))
    return blocks + extrapolation_study.intro(report)


def _few(report: dict[str, Any]) -> bool:
    """Whether a table by length has a bin of few sentences."""
    return extrapolation_study.few(report) or any(
        is_few(b["sentences"]) for r in report["summary"]
        for key in ("buckets", "target_buckets") for b in r.get(key) or ())


def how_to_read(report: dict[str, Any]) -> list[Block]:
    """The report's one section on what its tables say: the columns of a split's table, the
    cells of the tables by length, ``few``, and the marker where a row or run carries it."""
    text = [MEANING.format(baseline=report["baseline"]) + " `Δ`: the mean over seeds minus "
            "the baseline's; + is better. `time per word`: training time per word over the "
            f"baseline's, from fairseq's words per second: {_speed(report)}."]
    if any(r.get(key) for r in report["summary"] for key in ("buckets", "target_buckets")):
        text.append("Tables by source and by reference length (in Moses tokens): each cell is "
                    "BLEU / chrF of the sentences in that bin, the mean over seeds; a bin's BLEU "
                    "compares encodings, not bins. No bin is tested for significance: p is over "
                    "all sentences. By the reference's length too, because the drop on long "
                    "sentences follows the output's length (Varis and Bojar 2021, EMNLP).")
    text.append(extrapolation_study.reading(report))
    if _few(report):
        text.append(FEW_NOTE + ".")
    if convergence.any_marked(report["summary"]) or convergence.any_marked(report["runs"]):
        text.append(convergence.explanation(report["settings"]))
    return [("h2", "How to read", READ_ANCHOR)] + [("p", t) for t in text if t]


def pointer(rows: Iterable[dict[str, Any]], also: str = "") -> list[Block]:
    """The line under a table: ``also`` (what is the table's own), then a link to "How to
    read", which says what its cells and its marker mean."""
    marked = " and †" if convergence.any_marked(rows) else ""
    return [("p", (also + " " if also else "")
             + f"What its cells{marked} mean: [above](#{READ_ANCHOR}).")]


def document(report: dict[str, Any], pictures: Path, inspect: dict[str, Path]) -> list[Block]:
    s = report["settings"]
    baseline = report["baseline"]
    blocks = _intro(report) + how_to_read(report)
    for split in dict.fromkeys(r["split"] for r in report["summary"]):
        rows = [r for r in report["summary"] if r["split"] == split]
        base = next(r for r in rows if r["encoding"] == baseline)
        blocks.append(("h2", f"{split}: {rows[0]['sentences']} sentences, "
                             f"{rows[0]['beyond_training']} longer than any training source"))
        blocks.append(("table", ["encoding", "BLEU", "chrF", f"Δ BLEU vs {baseline}",
                                 "p (BLEU)", "Δ chrF", "p (chrF)", "parameters added",
                                 "time per word"],
                       [[convergence.marked(f"`{r['encoding']}`", r.get("still_improving")),
                         _mean_sd(r["bleu_mean"], r["bleu_sd"], r["n"]),
                         _mean_sd(r["chrf_mean"], r["chrf_sd"], r["n"]),
                         _signed(_delta(r, base, "bleu_mean")),
                         _p(r["p_value"], r["significant"], _delta(r, base, "bleu_mean")),
                         _signed(_delta(r, base, "chrf_mean")),
                         _p(r["chrf_p_value"], r["chrf_significant"],
                            _delta(r, base, "chrf_mean")),
                         f"{r['params_added']:+,}", _num(r["speed_ratio"])] for r in rows]))
        blocks += pointer(rows)
        blocks += _length_tables(rows, (report.get("bins") or {}).get("splits", {}).get(split))
        blocks += extrapolation_study.blocks(report, split, pictures, pointer)
    for name, alt in (("lengths.png", "BLEU and chrF by source and reference length"),
                      ("validation.png", "validation loss of every run")):
        if name == "validation.png":
            blocks.append(("h2", "Training"))
        if (pictures / name).exists():
            blocks.append(("img", pictures / name, alt))
    blocks.append(("table", ["encoding", "seed", "stopped", "checkpoint", "words per second",
                             *(f"{t} BLEU / chrF" for t in s["tests"]), "still improving"],
                   [[convergence.marked(f"`{r['encoding']}`", r.get("still_improving")),
                     str(r["seed"]), convergence.stopped_cell(r, s.get("patience")),
                     f"`{_short(r['checkpoint'])}`", _num(r["words_per_second"], 0),
                     *(f"{r['tests'][t]['bleu']:.2f} / {r['tests'][t]['chrf']:.2f}"
                       if t in r["tests"] else "not yet" for t in s["tests"]),
                     convergence.cell(r)]
                    for r in report["runs"]]))
    if convergence.any_marked(report["runs"]):
        blocks.append(("p", f"What † means: [above](#{READ_ANCHOR})."))
    if inspect:
        blocks.append(("h2", "What each encoding learned"))
        blocks.append(("links", [(f"{e}: posenc-inspect's pictures (seed 1)", p)
                                 for e, p in inspect.items()]))
    return blocks


def _length_tables(rows: Sequence[dict[str, Any]], edges: Optional[dict[str, list]]) -> list[Block]:
    """A split's tables by source length and by reference length (:mod:`.length_bins`), each
    bin's header with its count and ``few`` when few, and a line pointing to how to read
    them; ``edges``: the split's bins as ``report.json`` holds them."""
    out: list[Block] = []
    beyond = (" (the last column: sources longer than every training source, in the model's "
              "subword tokens)" if rows[0]["beyond_training"] else "")
    for key, side, title in (("buckets", "source", f"By source length in Moses tokens{beyond}"),
                             ("target_buckets", "target", "By reference length in Moses tokens")):
        first = rows[0].get(key)
        if not first:
            continue
        out.append(("h3", title))
        out.append(("table", ["encoding"] + [column(b["label"], b["sentences"]) for b in first],
                    [[convergence.marked(f"`{r['encoding']}`", r.get("still_improving"))] + [
                        f"{_num(b['bleu'])} / {_num(b['chrf'])}"
                        + (f" ({b['untranslated']} untranslated)" if b["untranslated"] else "")
                        for b in r[key]] for r in rows]))
        short_bins = side == "target" and edges and short(edges[side])
        out += pointer(rows, SHORT_NOTE + "." if short_bins else "")
    return out


def markdown(blocks: Sequence[Block], base: Path) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + block[1])
        elif kind == "p":
            out.append(block[1])
        elif kind == "table":
            header, rows = block[1], block[2]
            out.append("\n".join(["| " + " | ".join(header) + " |",
                                  "|" + "---|" * len(header)]
                                 + ["| " + " | ".join(row) + " |" for row in rows]))
        elif kind == "img":
            out.append(f"![{block[2]}]({_relative(block[1], base)})")
        elif kind == "links":
            out.append("\n".join(f"- [{text}]({_relative(path, base)})"
                                 for text, path in block[1]))
    return "\n\n".join(out) + "\n"


def _inline(text: str) -> str:
    """Escaped text with Markdown's inline code as <code> and its links to an anchor of the
    page, ``[words](#anchor)``, as <a>."""
    parts = re.split(r"`([^`]*)`", text)
    return "".join(f"<code>{html_lib.escape(p)}</code>" if i % 2 else
                   re.sub(r"\[([^\]]+)\]\(#([\w-]+)\)", r'<a href="#\2">\1</a>',
                          html_lib.escape(p))
                   for i, p in enumerate(parts))


def html(blocks: Sequence[Block], base: Path, title: str) -> str:
    body = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            anchor = f' id="{block[2]}"' if len(block) > 2 else ""
            body.append(f"<{kind}{anchor}>{_inline(block[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline(block[1])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                           for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img" and Path(block[1]).exists():
            data = base64.b64encode(Path(block[1]).read_bytes()).decode("ascii")
            body.append(f'<img alt="{html_lib.escape(block[2])}" '
                        f'src="data:image/png;base64,{data}">')
        elif kind == "links":
            items = "".join(f'<li><a href="{html_lib.escape(_relative(path, base))}">'
                            f"{_inline(text)}</a></li>" for text, path in block[1])
            body.append(f"<ul>{items}</ul>")
    style = ("body{font-family:sans-serif;max-width:75em;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
             "padding:.25em .6em;text-align:left}th{background:#f3f3f3}img{max-width:100%}"
             "code{background:#f3f3f3;padding:0 .2em}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
            f"{html_lib.escape(title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _relative(path: Union[Path, str], base: Path) -> str:
    return Path(os.path.relpath(Path(path), base)).as_posix()


def write(report: dict[str, Any], out: Path, inspect: dict[str, Path]) -> list[Path]:
    """``OUT/report.md`` and ``OUT/report/index.html``, their pictures in ``OUT/report/``."""
    pictures = out / "report"
    for old in pictures.glob("*.png"):
        old.unlink()
    plots.length_plot(report, pictures / "lengths.png")
    plots.loss_plot(report["runs"], pictures / "validation.png")
    extrapolation_study.draw(report, pictures)
    blocks = document(report, pictures, inspect)
    md, page = out / "report.md", pictures / "index.html"
    write_text_atomic(md, markdown(blocks, out))
    title = blocks[0][1]
    write_text_atomic(page, html(blocks, pictures, title))
    return [md, page]
