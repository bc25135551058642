"""Gettext catalogs and Debian packages written from their documented formats, independent
of ``fairseq_posenc.tools.gettext_corpus`` (the reference its readers are tested against).

* :func:`write_mo`: the GNU ``.mo`` format (GNU gettext manual, "The Format of GNU MO
  Files"): a 28-byte header (magic 0x950412de, revision 0, N strings, the offsets of the
  original and translation tables, an empty hash table), two tables of N (length, offset)
  pairs, then the NUL-terminated strings, originals sorted as msgfmt sorts them.
* :func:`write_ar_deb`: a ``.deb`` as deb(5) describes it, an ``ar`` archive (ar(5)'s common
  format: ``!<arch>\\n``, 60-byte member headers) of ``debian-binary``, ``control.tar.gz`` and
  ``data.tar.xz``; :func:`dpkg_deb_build` has ``dpkg-deb --build`` make one from a tree.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path
from typing import Optional


def mo_entry(msgid: str, msgstr, context: Optional[str] = None,
             plural: Optional[str] = None) -> tuple[bytes, bytes]:
    """One catalog entry as the .mo file stores it: ``msgstr`` a string, or the list of
    plural forms when ``plural`` (msgid_plural) is given."""
    original = (f"{context}\x04" if context is not None else "") + msgid
    if plural is not None:
        original += "\x00" + plural
        msgstr = "\x00".join(msgstr)
    return original.encode("utf-8"), msgstr.encode("utf-8")


def write_mo(entries: list[tuple[bytes, bytes]], header: str, big_endian: bool = False,
             encoding: str = "utf-8") -> bytes:
    """A .mo file of ``entries`` (from :func:`mo_entry`, or raw bytes in ``encoding``) with
    the header entry ``header`` (``Field: value`` lines)."""
    strings = sorted([(b"", header.encode(encoding))] + entries)
    order = ">" if big_endian else "<"
    n = len(strings)
    originals_at, translations_at = 28, 28 + 8 * n
    data_at = translations_at + 8 * n
    blob, originals, translations = b"", [], []
    for table, index in ((originals, 0), (translations, 1)):
        for pair in strings:
            text = pair[index]
            table.append((len(text), data_at + len(blob)))
            blob += text + b"\x00"
    out = struct.pack(order + "7I", 0x950412DE, 0, n, originals_at, translations_at, 0, 0)
    for length, offset in originals + translations:
        out += struct.pack(order + "2I", length, offset)
    return out + blob


def tar_bytes(files: dict[str, bytes], mode: str,
              links: Optional[dict[str, str]] = None) -> bytes:
    """A tar archive of ``files`` (name -> content, as ``./path``) and symbolic ``links``
    (name -> target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"./{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


def ar_archive(members: list[tuple[str, bytes]]) -> bytes:
    """An ar archive: each member a 60-byte header (name/ in 16 bytes, mtime 12, uid 6, gid
    6, octal mode 8, decimal size 10, a backquote and newline), its content padded with a
    newline to an even length."""
    out = b"!<arch>\n"
    for name, content in members:
        header = (f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(content):<10}`\n")
        out += header.encode("ascii") + content + (b"\n" if len(content) % 2 else b"")
    return out


def write_ar_deb(files: dict[str, bytes], links: Optional[dict[str, str]] = None) -> bytes:
    """A .deb whose data archive installs ``files`` (and ``links``)."""
    control = tar_bytes({"control": b"Package: test\nVersion: 1\nArchitecture: all\n"}, "w:gz")
    return ar_archive([("debian-binary", b"2.0\n"), ("control.tar.gz", control),
                       ("data.tar.xz", tar_bytes(files, "w:xz", links))])


def dpkg_deb_build(tree: Path, files: dict[str, bytes], out: Path) -> Optional[bytes]:
    """The .deb ``dpkg-deb --build`` makes of a package installing ``files``, or None
    without dpkg-deb."""
    if shutil.which("dpkg-deb") is None:
        return None
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: test\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <t@example.org>\n"
        "Description: test\n test\n")
    for name, content in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(content)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(out)],
                   check=True, capture_output=True)
    return out.read_bytes()
