"""The repository stands on its own: what a user clones is all the text refers to.

A clone holds only the files git tracks. Checks over them:
- no tracked file points outside the repository: to a folder beside the checkout, to
  working notes kept elsewhere, or to an issue tracker's numbers (what the code relies on
  is written in ``docs/``);
- no tracked file names the host of a package registry (PyPI's, Debian's archive's,
  npm's): the tools take a mirror from the machine or the command line, and the docs say
  "a Debian mirror";
- every relative link in a tracked Markdown file leads to a tracked file, and every
  ``#anchor`` into a Markdown page to one of its headings, so that each page the README
  moved a paragraph to is one click away and stays so;
- the README stays a page read in one sitting (at most 300 lines), ``docs/README.md``
  lists every page of ``docs/``, and the module docstrings of the attention and the
  kernels stay summaries (at most 25 lines; the rest is ``docs/architecture.md`` and
  ``docs/decisions.md``).
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The patterns are assembled from pieces so that this file does not match itself.
OUTSIDE = {
    "a folder beside the checkout": re.compile(r"\.\./" + "shared"),
    "the team's notes": re.compile(r"\b(SPEC|FAIRSEQ_" + r"NOTES)\.md\b|FAIRSEQ_" + "NOTES"),
    "an issue number": re.compile(r"\b" + "issues?" + r"[ -]?#?\d+", re.IGNORECASE),
}

#: The registries' hosts, any subdomain (deb., archive., files.); assembled from pieces too.
REGISTRY = re.compile(r"\b(" + "|".join(
    [r"debian\.org", "pypi" + r"\.org", "python" + r"hosted\.org", "npm" + r"js\.(org|com)"])
    + r")\b", re.IGNORECASE)

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / name for name in out.decode().split("\0") if name]


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte) or one that is gone."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return None if b"\0" in data else data.decode("utf-8", errors="replace")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, code marks and punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found, in_code = set(), False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (m := HEADING.match(line)):
            found.add(slug(m.group(1)))
    return found


def test_no_tracked_file_refers_outside_the_repository():
    hits = []
    for path in tracked_files():
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in OUTSIDE.items():
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:120]}")
    assert not hits, "say it in the repository's own docs instead:\n" + "\n".join(hits)


def test_no_tracked_file_names_a_package_registrys_host():
    hits = []
    for path in tracked_files():
        text = text_of(path)
        for number, line in enumerate((text or "").splitlines(), 1):
            if REGISTRY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not hits, ("a registry's host in the repository: take the mirror from the machine or "
                      "a flag, and say \"a Debian mirror\" in the docs:\n" + "\n".join(hits))


def test_relative_links_in_markdown_lead_to_tracked_files_and_headings():
    files = tracked_files()
    tracked = {p.resolve() for p in files}
    tracked_dirs = {parent for p in tracked for parent in p.parents}
    broken = []
    for page in (p for p in files if p.suffix == ".md"):
        text = text_of(page)
        if text is None:
            continue
        body = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
        for target in LINK.findall(body):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page.resolve()
            where = f"{page.relative_to(ROOT)}: ({target})"
            if dest not in tracked and dest not in tracked_dirs:
                broken.append(f"{where}: no such tracked file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(text_of(dest) or ""):
                broken.append(f"{where}: no heading with that anchor")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("heading, anchor", [
    ("The from-parts ratio", "the-from-parts-ratio"),
    ("The host's work per decoding step (`--sizes narrow`)",
     "the-hosts-work-per-decoding-step---sizes-narrow"),
    ("MultiheadAttention's fast path", "multiheadattentions-fast-path"),
    ("Reference numbers", "reference-numbers"),
])
def test_anchor_of_a_heading_is_githubs(heading, anchor):
    assert slug(heading) == anchor


def test_readme_is_read_in_one_sitting():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move detail to a page of docs/"


def test_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = {(ROOT / "docs" / target.partition("#")[0]).resolve()
              for target in LINK.findall(index)}
    pages = [p for p in tracked_files()
             if p.suffix == ".md" and p.parent == ROOT / "docs" and p.name != "README.md"]
    pages += [p for p in tracked_files()
              if p.name == "README.md" and p.parent.parent == ROOT / "docs"]
    missing = [str(p.relative_to(ROOT)) for p in pages
               if p.resolve() not in linked and p.parent.resolve() not in linked]
    assert not missing, f"docs/README.md does not list: {missing}"


@pytest.mark.parametrize("module", ["plugin/attention.py", "core/attention_core.py", "nn.py",
                                    "core/kernels"])
def test_attention_and_kernel_module_docstrings_are_summaries(module):
    paths = sorted((ROOT / "fairseq_posenc" / module).rglob("*.py")) \
        if module == "core/kernels" else [ROOT / "fairseq_posenc" / module]
    long = {}
    for path in paths:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if len(doc.splitlines()) > 25:
            long[str(path.relative_to(ROOT))] = len(doc.splitlines())
    assert not long, f"module docstrings over 25 lines (move detail to docs/): {long}"
