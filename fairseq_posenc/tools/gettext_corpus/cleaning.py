"""Catalog messages to one-line (English, translation) sentence pairs.

The rules, and why (docs/real-corpus.md has the counts each rule drops):

* The header entry (empty msgid) is not a message. A message's context (msgctxt) only tells
  messages apart for the program; its text is the pair. A context written into the English
  string itself, glib's ``Q_("context|text")`` and freeciv's ``"?context:text"``, which
  translators leave out, is removed (from the translation too where it was copied).
* A plural message gives two pairs: the English singular with the form the catalog's
  ``Plural-Forms`` uses for n = 1, and the English plural with the form for n = 2.
* A message of several lines is aligned paragraph by paragraph (blocks between empty
  lines), when both sides have as many. A paragraph whose English lines wrap one text (each
  continues the line before in lowercase) becomes one line on each side: translators wrap
  at their own places, so its lines do not translate each other. The lines of any other
  paragraph (a program's option list, a usage synopsis) are paired in order when both sides
  have as many. What cannot be aligned is dropped.
* Runs of ASCII whitespace (tabs aligning a program's help) and of the characters other
  readers take as line breaks become one space, and the ends are trimmed; no-break spaces,
  typographic quotes and format directives (``%s``, ``{0}``, ``%1``, ``~a``) stay as the
  translators wrote them: users' text has them too.
* Accelerator markers, ``_`` (GTK) and ``&`` (Qt, KDE) before the letter a menu underlines,
  are removed: they sit on different letters in the two languages and no sentence outside a
  menu has them. One is removed when each side has exactly one of the same kind and it marks
  a translated word (:func:`strip_markers`).
* Dropped: an empty translation (untranslated), the translator credits, a translation equal
  to the English (left untranslated on purpose: product names, keyboard models, internal
  errors), an English side without a letter outside its format directives (``%d%%``), and
  lines over ``max_words`` English words.
"""

from __future__ import annotations

import gettext
import re
from collections import Counter
from typing import Callable, Iterator

from .catalogs import Message, read_mo

# Messages whose translation is the translators' names or addresses (KDE, GNOME).
CREDITS = frozenset({"Your names", "Your emails", "NAME OF TRANSLATORS", "EMAIL OF TRANSLATORS",
                     "translator-credits", "translator_credits"})
# ASCII whitespace and what other readers take as line breaks; no-break spaces stay.
WHITESPACE = re.compile("[ \t\r\f\v\x1c\x1d\x1e\x85\u2028\u2029]+")
# A marker before the letter or digit it underlines; not a doubled "__" or "&&", not an HTML
# entity such as "&amp;" or "&#8217;".
MARKERS = (re.compile(r"(?<!_)_(?=[^\W_])"),
           re.compile(r"(?<!&)&(?=[^\W_])(?![a-zA-Z]+;|#\d+;)"))
# Format directives: printf's (%s, %-5.2f, %1$s, %(name)s, %%), Qt's %1, and {0} / {name}.
DIRECTIVE = re.compile(r"%(\([^)]*\)|\d+\$)?[-+ #0-9.*]*(hh|ll|[hlLqjzt])?[a-zA-Z%]|%\d+|"
                       r"\{\w*\}")
PIPE_CONTEXT = re.compile(r"^[A-Za-z][\w,.-]*\|(?=\S)")  # glib's Q_("context|text")
QUESTION_CONTEXT = re.compile(r"^\?[\w -]+:(?=\S)")  # freeciv's Q_("?context:text")


def strip_markers(en: str, de: str) -> tuple[str, str]:
    """Remove an accelerator marker from both sides when each has exactly one of the same
    kind and it marks a translated word: it starts the English text, or the English word
    holding it does not occur unchanged in the translation. An identifier such as
    ``LC_ALL`` or ``x86_64`` is copied into the translation; an accelerator moves with
    its word (``Select _All`` / ``_Alles auswählen``)."""
    for pattern in MARKERS:
        en_marks, de_marks = list(pattern.finditer(en)), list(pattern.finditer(de))
        if len(en_marks) != 1 or len(de_marks) != 1:
            continue
        at, de_at = en_marks[0].start(), de_marks[0].start()
        end = en.find(" ", at)
        word = en[en.rfind(" ", 0, at) + 1:len(en) if end < 0 else end]
        if at == 0 or word not in de:
            en, de = en[:at] + en[at + 1:], de[:de_at] + de[de_at + 1:]
    return en, de


def strip_context(en: str, de: str) -> tuple[str, str]:
    """Remove a context written at the start of the English string: ``context|`` when the
    translation has no ``|`` (with one, the English ``|`` is part of the text, as in
    ``FILE|URI``), and ``?context:``, from the translation too where it was copied."""
    match = PIPE_CONTEXT.match(en)
    if match and "|" not in de:
        en = en[match.end():]
    match = QUESTION_CONTEXT.match(en)
    if match:
        en = en[match.end():]
        if de.startswith(match.group()):
            de = de[match.end():]
    return en, de


def message_texts(message: Message, plural_index: Callable[[int], int]
                  ) -> Iterator[tuple[str, str]]:
    """(English, translation) texts of one message: the singular with its translation, and
    for a plural message the singular with the form for n = 1 and the English plural with
    the form for n = 2 (German: forms 0 and 1)."""
    if message.msgid_plural is None:
        yield message.msgid, message.msgstr[0]
        return
    for en, n in ((message.msgid, 1), (message.msgid_plural, 2)):
        index = plural_index(n)
        if index < len(message.msgstr):
            yield en, message.msgstr[index]


def paragraphs(text: str) -> list[list[str]]:
    """The paragraphs of a message (blocks of lines between empty lines), without the
    newlines that start or end it."""
    blocks: list[list[str]] = [[]]
    for line in text.replace("\r\n", "\n").strip("\n").split("\n"):
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [block for block in blocks if block]


def wrapped(lines: list[str]) -> bool:
    """Whether English lines are one text wrapped at a width: each line after the first
    starts, unindented, with a lowercase letter, and the line before it ends without a full
    stop, colon, question or exclamation mark."""
    return len(lines) > 1 and all(
        after[:1].islower() and not before.rstrip().endswith((".", ":", "?", "!"))
        for before, after in zip(lines, lines[1:]))


def aligned_lines(en: str, de: str, stats: Counter) -> list[tuple[str, str]]:
    """The lines of a message and of its translation that translate each other: paragraph
    by paragraph (both sides need as many), a paragraph that wraps one English text joined
    into one line on each side (translators wrap their text at their own places), the
    lines of any other paragraph paired in order (both sides need as many lines)."""
    en_blocks, de_blocks = paragraphs(en), paragraphs(de)
    if len(en_blocks) != len(de_blocks):
        stats["paragraphs, not as many on both sides"] += 1
        return []
    lines = []
    for en_lines, de_lines in zip(en_blocks, de_blocks):
        if wrapped(en_lines):
            stats["wrapped paragraph, joined into a line"] += 1
            lines.append((" ".join(en_lines), " ".join(de_lines)))
        elif len(en_lines) == len(de_lines):
            stats["lines of a paragraph, paired"] += len(en_lines) > 1
            lines += zip(en_lines, de_lines)
        else:
            stats["paragraph, lines not as many on both sides"] += 1
    return lines


def clean(en: str, de: str, max_words: int, stats: Counter) -> list[tuple[str, str]]:
    """The one-line pairs of one English text and its translation, by the module's rules;
    ``stats`` counts the texts and lines dropped, by reason."""
    if not de.strip():
        stats["untranslated (empty translation)"] += 1
        return []
    if en.strip() in CREDITS:
        stats["translator credits"] += 1
        return []
    pairs = []
    for en_line, de_line in aligned_lines(en, de, stats):
        en_line = WHITESPACE.sub(" ", en_line).strip(" ")
        de_line = WHITESPACE.sub(" ", de_line).strip(" ")
        en_line, de_line = strip_markers(*strip_context(en_line, de_line))
        if not en_line or not de_line:
            stats["line empty on one side"] += 1
        elif en_line == de_line:
            stats["translation equal to the English"] += 1
        elif not any(c.isalpha() for c in DIRECTIVE.sub("", en_line)):
            stats["no letter in the English"] += 1
        elif len(en_line.split()) > max_words:
            stats[f"over {max_words} English words"] += 1
        else:
            pairs.append((en_line, de_line))
    return pairs


def plural_rule(header: dict[str, str]) -> Callable[[int], int]:
    """The catalog's plural form index for n (``Plural-Forms: nplurals=2; plural=(n !=
    1);``), gettext's own evaluation of the C expression; English's rule without one."""
    match = re.search(r"plural=([^;]+)", header.get("plural-forms", ""))
    try:
        return gettext.c2py(match.group(1).strip()) if match else gettext.c2py("n != 1")
    except (ValueError, RecursionError):
        return gettext.c2py("n != 1")


def catalog_pairs(data: bytes, max_words: int, stats: Counter) -> list[tuple[str, str]]:
    """The cleaned pairs of one ``.mo`` file, in the file's order; ``stats["messages"]``
    counts its messages (the header not included)."""
    header, messages = read_mo(data)
    plural_index = plural_rule(header)
    pairs = []
    for message in messages:
        stats["messages"] += 1
        for en, de in message_texts(message, plural_index):
            pairs += clean(en, de, max_words, stats)
    return pairs
