"""Where the packages are downloaded from without ``--mirror``: the Debian mirror of this
machine's apt sources.

The repository names no mirror: the pinned files are verified by size and SHA-256
(:mod:`.packages`), so any Debian mirror serves them, and the one apt already uses is the
one this machine can reach. apt's sources are read as apt reads them:
``etc/apt/sources.list`` and ``etc/apt/sources.list.d/*.list`` in the one-line format
(``deb [options] URI SUITE COMPONENT...``), then ``etc/apt/sources.list.d/*.sources`` in the
deb822 format (stanzas of ``Types:``, ``URIs:``, ``Suites:``, ``Enabled:``), the files of
``sources.list.d`` in name order.

A source is a Debian mirror when it is of type ``deb``, its URI is ``http``, ``https`` or
``file``, and one of its suites is Debian's (:func:`is_debian_suite`: a release's codename
such as ``bookworm`` or an alias such as ``stable``, bare or with ``-updates``,
``-backports`` or ``-proposed-updates``): such a mirror serves Debian's ``pool/main/...``,
where the pinned files lie. A ``-security`` suite is not one (the security archive lays its
files out under ``pool/updates/``), nor is another distribution's (Ubuntu's ``jammy``) or
a vendor's repository (``nodistro``). Every Debian mirror found is tried, in the order apt
lists them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from ..textprep.files import PrepareError

#: Debian's release codenames, from 1.1 on, the next ones announced included.
CODENAMES = frozenset(
    "buzz rex bo hamm slink potato woody sarge etch lenny squeeze wheezy jessie stretch buster "
    "bullseye bookworm trixie forky duke sid experimental".split())
#: The suites' aliases for the releases of the moment.
ALIASES = frozenset({"stable", "testing", "unstable", "oldstable", "oldoldstable"})
#: The suites beside a release's own that Debian's mirrors serve from the same pool.
SUFFIXES = ("", "-updates", "-backports", "-backports-sloppy", "-proposed-updates")


def is_debian_suite(suite: str) -> bool:
    """A suite of Debian's main archive: ``bookworm``, ``stable-updates``, ``sid``; not
    ``bookworm-security``, ``jammy`` or ``nodistro``."""
    return any(suite == name + suffix for name in CODENAMES | ALIASES for suffix in SUFFIXES)


def _one_line(text: str) -> Iterator[tuple[str, str, list[str]]]:
    """``(type, URI, [suite])`` of each line of a ``.list`` file."""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        line = re.sub(r"\[[^\]]*\]", " ", line)  # [arch=amd64 signed-by=...]
        fields = line.split()
        if len(fields) >= 3:
            yield fields[0], fields[1], [fields[2]]


def _deb822(text: str) -> Iterator[tuple[str, str, list[str]]]:
    """``(type, URI, suites)`` of each type and URI of each enabled stanza of a
    ``.sources`` file."""
    stanzas: list[dict[str, str]] = [{}]
    key = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if stanzas[-1]:
                stanzas.append({})
            key = None
        elif line[0] in " \t" and key:  # a field continued on the next line
            stanzas[-1][key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            stanzas[-1][key] = value.strip()
    for stanza in stanzas:
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        for kind in stanza.get("types", "").split():
            for uri in stanza.get("uris", "").split():
                yield kind, uri, stanza.get("suites", "").split()


def _files(root: Path) -> Iterator[tuple[Path, bool]]:
    """apt's source files under ``root`` in apt's order, each with whether it is deb822."""
    etc = root / "etc" / "apt"
    yield etc / "sources.list", False
    parts = etc / "sources.list.d"
    found = sorted(parts.iterdir()) if parts.is_dir() else []
    yield from ((p, False) for p in found if p.suffix == ".list")
    yield from ((p, True) for p in found if p.suffix == ".sources")


def _uri(uri: str) -> Optional[str]:
    """A mirror's root as a URL the download reads; None for a scheme other than ``http``,
    ``https`` or ``file`` (``cdrom:``, ``mirror+http:``)."""
    if re.match(r"^https?://", uri) or uri.startswith("file://"):
        return uri.rstrip("/")
    if uri.startswith("file:/"):  # apt's file:/srv/mirror
        return Path(uri[len("file:"):]).as_uri()
    return None


def debian_mirrors(root: Path = Path("/")) -> list[tuple[str, Path]]:
    """The Debian mirrors of the apt sources under ``root`` (module docstring), each once,
    in apt's order, with the file that names it."""
    found: dict[str, Path] = {}
    for path, deb822 in _files(root):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:  # absent or unreadable: apt skips it too
            continue
        for kind, uri, suites in (_deb822 if deb822 else _one_line)(text):
            mirror = _uri(uri)
            if kind == "deb" and mirror and any(is_debian_suite(s) for s in suites):
                found.setdefault(mirror, path)
    return list(found.items())


def from_apt(root: Path, needed: Sequence[str], log: Callable[[str], None]) -> tuple[str, ...]:
    """:func:`debian_mirrors` of ``root``, to download ``needed`` (the files not in the
    cache) from without ``--mirror``; refused, naming ``--mirror``, when there is none."""
    found = debian_mirrors(root)
    if not found:
        sources = root / "etc" / "apt"
        raise PrepareError(
            f"no Debian mirror to download {len(needed)} package file(s) from "
            f"({', '.join(needed[:3])}{', ...' if len(needed) > 3 else ''}): this machine's "
            f"apt sources ({sources / 'sources.list'}, {sources / 'sources.list.d'}) name "
            "none (a 'deb' source of a Debian suite such as bookworm or stable). Pass "
            "--mirror URL with a Debian mirror's root (the directory above pool/), repeated "
            "to try several in order, or --mirror DIR laid out like one; or put the files "
            "into --cache")
    for mirror, path in found:
        log(f"mirror {mirror} (from {path})")
    return tuple(mirror for mirror, _ in found)
