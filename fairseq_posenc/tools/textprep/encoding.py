"""Whether a text file is UTF-8, and what it looks like when it is not: the check every raw
corpus gets before anything is prepared from it (``posenc-prepare-corpus``, ``posenc-compare``
with raw ``--data``) and the files ``posenc-score`` and ``posenc-hypotheses`` read.

The preparation reads text with invalid bytes replaced (:func:`.files.open_text`: a
downloaded WMT corpus is taken as it is), so a file in another encoding would go through
silently: Latin-1 umlauts become U+FFFD (and the cleaning drops the pairs they lengthen),
UTF-16 becomes a NUL byte between characters. :func:`check_utf8` refuses such a file
before any work, naming it, the first line that is not UTF-8, how many lines are not, and
the encoding it looks like, with the ``iconv`` command that converts it:

* a byte-order mark of UTF-16 or UTF-32 (LE or BE);
* NUL bytes, which no line of text holds: UTF-16 LE or BE without a byte-order mark when
  they fall on every other byte (the odd bytes: LE; the even: BE), else binary data;
* other bytes that are not UTF-8: an 8-bit encoding, shown as cp1252 (Windows-1252, the
  superset of Latin-1 that Western European text is usually in) reads the line; Czech or
  Polish text is more likely cp1250 or Latin-2, which the message says too.

A UTF-8 byte-order mark (``EF BB BF``) at the start of a file is accepted: every reader of
the preparation drops it (:func:`.files.open_text` reads ``utf-8-sig``), as Python's
``utf-8-sig``, Notepad and most tools do, so it never becomes part of the first sentence
or a vocabulary entry.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Optional

from .files import PrepareError

#: Byte-order marks of the encodings that are not UTF-8, UTF-32 first (its LE mark starts
#: with UTF-16 LE's): the name, and iconv's name of the encoding with its mark.
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32 LE", "UTF-32"),
         (codecs.BOM_UTF32_BE, "UTF-32 BE", "UTF-32"),
         (codecs.BOM_UTF16_LE, "UTF-16 LE", "UTF-16"),
         (codecs.BOM_UTF16_BE, "UTF-16 BE", "UTF-16"))

_BLOCK = 1 << 20


def check_utf8(path: Path) -> None:
    """:class:`~.files.PrepareError` unless ``path`` is UTF-8 text (a leading UTF-8
    byte-order mark allowed) without NUL bytes; the message names the file, the first line
    that is not, and what the file looks like (see the module docstring). Reads the file
    once, in blocks."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(4)
        for bom, name, iconv in _BOMS:
            if head.startswith(bom):
                raise PrepareError(f"{path} is {name} text (it starts with the {name} "
                                   f"byte-order mark), not UTF-8: {_convert(path, iconv)}")
        f.seek(0)
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset, line = 0, 1  # the file's bytes and lines before this block
        for block in iter(lambda: f.read(_BLOCK), b""):
            buffered = decoder.getstate()[0]  # a character's first bytes, from the last block
            data = buffered + block
            nul = data.find(b"\0")
            try:
                decoder.decode(block if nul < 0 else block[:nul - len(buffered)])
                bad = nul
            except UnicodeDecodeError as e:  # e.start: in data, the decoder's buffer first
                bad = e.start
            if bad >= 0:
                _refuse(path, offset - len(buffered) + bad,
                        line + data[:bad].count(b"\n"), is_nul=data[bad:bad + 1] == b"\0")
            offset += len(block)
            line += block.count(b"\n")
        try:
            decoder.decode(b"", final=True)  # a character cut off at the end of the file
        except UnicodeDecodeError:
            raise PrepareError(f"{path} ends in the middle of a UTF-8 character (line {line}): "
                               "it was cut off; make or copy it again") from None


def _refuse(path: Path, position: int, line: int, is_nul: bool) -> None:
    """Raise the error for the first byte that is not UTF-8 text: ``position`` in the file,
    on ``line``. Reads the file again, on the way out only, to say what it looks like."""
    if is_nul:
        with open(path, "rb") as f:
            parity = _nul_parity(f.read(_BLOCK))
        if parity is not None:
            name = "UTF-16 LE" if parity else "UTF-16 BE"
            raise PrepareError(
                f"{path}: line {line} holds NUL bytes, on every other byte: it looks like "
                f"{name} text without a byte-order mark, not UTF-8: "
                f"{_convert(path, name.replace(' ', ''))}")
        raise PrepareError(f"{path}: line {line} holds a NUL byte (offset {position}): no line "
                           "of text does; is it binary data? Give the corpus as UTF-8 text, a "
                           "sentence per line")
    bad, raw = 0, b""
    with open(path, "rb") as f:
        for number, text in enumerate(f, 1):
            bad += not _is_utf8(text)
            raw = text if number == line else raw
        f.seek(position)
        byte = f.read(1)[0]
    try:
        shown = raw.decode("cp1252")
    except UnicodeDecodeError:  # bytes cp1252 leaves undefined: Latin-1 reads every byte
        shown = raw.decode("latin-1")
    shown = shown.rstrip("\r\n")
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    more = f" (and {bad - 1:,} more line{'s' if bad > 2 else ''})" if bad > 1 else ""
    raise PrepareError(
        f"{path}: line {line}{more} is not UTF-8 (byte 0x{byte:02X} at offset {position}): "
        "it looks like an 8-bit "
        f"encoding, Latin-1 or cp1252 (Windows-1252), as which the line reads {shown!r} "
        "(Czech or Polish text: more likely cp1250 or Latin-2): "
        f"{_convert(path, 'CP1252')} (or the encoding it is in)")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _nul_parity(sample: bytes) -> Optional[int]:
    """1 when the NUL bytes of the file's first ``sample`` are (nearly) all at odd offsets
    (UTF-16 LE of mostly ASCII text), 0 when at even ones (BE), None when they follow no
    such pattern."""
    odd, even = sample[1::2].count(0), sample[0::2].count(0)
    if odd + even < 4 or max(odd, even) < 0.9 * (odd + even):
        return None
    return int(odd > even)


def _convert(path: Path, encoding: str) -> str:
    return (f"convert it, e.g. iconv -f {encoding} -t UTF-8 {path} > {path}.utf8, and "
            "use that file in its place")
