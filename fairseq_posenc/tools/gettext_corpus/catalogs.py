"""The gettext catalogs inside a Debian package, and the messages inside a catalog, read
with the standard library: a ``.deb`` is an ``ar`` archive whose ``data.tar.*`` member
(``tarfile`` reads its gzip, xz or bzip2 compression) holds the installed files, and a
``.mo`` file is the GNU format that :func:`read_mo` reads.

Python's ``gettext.GNUTranslations`` also reads ``.mo`` files, but it keeps a plural
message's forms under its singular alone and drops the English plural, which the corpus
pairs with the German plural (:mod:`.cleaning`); hence the reader here.
"""

from __future__ import annotations

import io
import re
import struct
import tarfile
from dataclasses import dataclass
from typing import Iterator

MO_MAGIC = 0x950412DE
AR_MAGIC = b"!<arch>\n"


def ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, content) of each member of an ``ar`` archive: after the 8-byte magic, each
    member is a 60-byte header (name in 16 bytes, GNU ar ending it with ``/``; the decimal
    size in bytes 48-58; the header ends with a backquote and a newline) and its content,
    padded to an even length."""
    if not data.startswith(AR_MAGIC):
        raise ValueError(f"not an ar archive (a .deb starts with {AR_MAGIC!r}, this file "
                         f"with {data[:8]!r})")
    pos = len(AR_MAGIC)
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        if header[58:60] != b"`\n":
            raise ValueError(f"bad ar member header at byte {pos}")
        name = header[:16].decode("ascii").rstrip(" ").rstrip("/")
        size = int(header[48:58].decode("ascii"))
        if pos + 60 + size > len(data):
            raise ValueError(f"ar member {name!r} runs past the end of the file")
        yield name, data[pos + 60:pos + 60 + size]
        pos += 60 + size + size % 2


def deb_catalogs(deb: bytes, lang: str) -> list[tuple[str, bytes]]:
    """(path, content) of the ``.mo`` files of language ``lang`` in a ``.deb``, sorted by
    path: any ``.../LANG/LC_MESSAGES/NAME.mo`` (``usr/share/locale/`` for most programs,
    ``usr/lib/libreoffice/program/resource/`` for LibreOffice). Links are skipped: the file
    they point to is read."""
    pattern = re.compile(rf"(^|/){re.escape(lang)}/LC_MESSAGES/[^/]+\.mo$")
    members = dict(ar_members(deb))
    data = next((members[name] for name in members if name.startswith("data.tar")), None)
    if data is None:
        raise ValueError(f"no data.tar member (the members are {', '.join(members)})")
    found = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile() and pattern.search(member.name):
                found[member.name.removeprefix("./")] = tar.extractfile(member).read()
    return sorted(found.items())


@dataclass
class Message:
    """One catalog entry: ``context`` (msgctxt, None without), the English ``msgid``, its
    ``msgid_plural`` (None for a message without plural forms) and the translated forms
    (one, or one per plural form)."""

    context: str | None
    msgid: str
    msgid_plural: str | None
    msgstr: list[str]


def read_mo(data: bytes) -> tuple[dict[str, str], list[Message]]:
    """The header fields (names lowercased) and the messages of a GNU ``.mo`` file.

    The format (GNU gettext manual, "The Format of GNU MO Files"): the magic number
    0x950412de in the file's byte order, the revision, the number of strings N, and the
    offsets of the table of original strings and of the table of translations, each table N
    pairs of 32-bit (length, offset). An original string is the msgid, ``msgctxt EOT msgid``
    with a context (EOT: the byte 0x04), and ``msgid NUL msgid_plural`` for a plural
    message, whose translation is its forms separated by NUL. The entry with the empty msgid
    is the header, ``Field: value`` lines, whose ``Content-Type`` names the charset of the
    other strings (UTF-8 when it names none).
    """
    if len(data) < 20:
        raise ValueError(f"too short for a .mo file ({len(data)} bytes)")
    order = next((o for o in "<>" if struct.unpack(o + "I", data[:4])[0] == MO_MAGIC), None)
    if order is None:
        raise ValueError(f"not a .mo file (it starts with {data[:4].hex()}, a .mo file with "
                         "the magic number 950412de in either byte order)")
    revision, count, originals, translations = struct.unpack(order + "4I", data[4:20])
    if revision >> 16 > 1:
        raise ValueError(f"unknown .mo major revision {revision >> 16}")

    def string(table: int, index: int) -> bytes:
        at = table + 8 * index
        length, offset = struct.unpack(order + "2I", data[at:at + 8])
        if offset + length > len(data):
            raise ValueError(f"string {index} runs past the end of the file")
        return data[offset:offset + length]

    raw = [(string(originals, i), string(translations, i)) for i in range(count)]
    header = {}
    for line in next((t for o, t in raw if o == b""), b"").decode("utf-8", "replace").split("\n"):
        name, colon, value = line.partition(":")
        if colon:
            header[name.strip().lower()] = value.strip()
    charset = re.search(r"charset=([\w.:-]+)", header.get("content-type", ""))
    encoding = charset.group(1) if charset and charset.group(1) != "CHARSET" else "utf-8"
    messages = []
    for original, translation in raw:
        if original == b"":
            continue
        context = None
        if b"\x04" in original:
            context_bytes, original = original.split(b"\x04", 1)
            context = context_bytes.decode(encoding)
        msgid, nul, plural = original.partition(b"\x00")
        messages.append(Message(context, msgid.decode(encoding),
                                plural.decode(encoding) if nul else None,
                                translation.decode(encoding).split("\x00")))
    return header, messages
