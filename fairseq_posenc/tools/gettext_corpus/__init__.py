"""A real English-German parallel corpus from Debian's gettext catalogs
(``scripts/make_gettext_corpus.py``; docs/real-corpus.md).

Free software is translated by people, message by message, into gettext catalogs, and Debian
ships the compiled catalogs (``usr/share/locale/de/LC_MESSAGES/*.mo``) in its packages.
:mod:`.packages`: the pinned list of packages and their verified download;
:mod:`.mirrors`: the Debian mirror of the machine's apt sources, without ``--mirror``;
:mod:`.catalogs`: the ``.mo`` files inside a ``.deb`` and the messages inside a ``.mo``;
:mod:`.cleaning`: messages to one-line sentence pairs; :mod:`.corpus_build`: the command, which
removes duplicates, splits and writes the corpus.
"""
