"""Write a report: every picture as ``{key}.png`` + ``{key}.json`` and an ``index.html``
that shows them with their captions.

Decisions: the HTML is static and self-contained apart from the PNGs beside it (relative
links, no scripts, no external CSS), so the output folder can be copied or attached as
is; every text is escaped. Pictures appear grouped by stack, in the order the terms were
found (input embedding first, then layer order); each figure links its JSON.
"""

from __future__ import annotations

import html
from pathlib import Path

from . import plots
from .records import Report

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
         "figure{margin:1.5em 0;border-top:1px solid #ccc;padding-top:1em}"
         "img{max-width:100%}figcaption{font-size:.9em;color:#333}"
         ".note{background:#f4f4f4;padding:.6em}")


def write(report: Report, out: Path) -> Path:
    """Draw every picture, write its JSON and ``index.html`` into ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>posenc-inspect: "
             f"{esc(report.encoding)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Position encoding <code>{esc(report.encoding)}</code></h1>",
             f"<p>Checkpoint: <code>{esc(report.checkpoint)}</code></p><ul>",
             *(f"<li>{esc(line)}</li>" for line in report.summary), "</ul>"]
    for note in report.notes:
        parts.append(f"<p class='note'><b>{esc(note.stack)}</b>: {esc(note.text)}</p>")
    stacks = list(dict.fromkeys(picture.stack for picture in report.pictures))
    for stack in stacks:
        parts.append(f"<h2>{esc(stack)}</h2>")
        for picture in (p for p in report.pictures if p.stack == stack):
            png = plots.draw(picture, out)
            data = picture.write_json(out)
            parts.append(
                f"<figure id='{esc(picture.key)}'><img src='{esc(png.name)}' "
                f"alt='{esc(picture.title)}'><figcaption><b>{esc(picture.title)}</b>. "
                f"{esc(picture.caption)} Values: <a href='{esc(data.name)}'>"
                f"{esc(data.name)}</a>.</figcaption></figure>")
    parts.append("</body></html>")
    index = out / "index.html"
    index.write_text("\n".join(parts), encoding="utf-8")
    return index
