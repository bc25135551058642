"""``--init-from``'s dictionaries against the prepared corpus's, before any work.

A fine-tuned row reads the corpus's token ids with the checkpoint's embeddings, so the
corpus must be binarized with the checkpoint's dictionaries, symbol for symbol. A fairseq
checkpoint holds none (its ``task_state`` is empty; ``cfg.task.data`` names the directory it
was trained on), so they are read, in this order, from

1. ``--init-dict SRC [TGT]``, where given (one file: a joined dictionary, both sides);
2. the directory ``cfg.task.data`` names (its first path), ``dict.SRC.txt`` and
   ``dict.TGT.txt`` (the languages the checkpoint's task records, else ``-s`` and ``-t``);
3. the checkpoint's own directory, the same two files (as fairseq's released models come:
   ``model.pt`` beside ``dict.en.txt`` and ``dict.de.txt``).

A dictionary found must fit the checkpoint (as many types as its embeddings have rows: else
it is not its dictionary) and equal the corpus's (``bin/dict.SRC.txt``, ``bin/dict.TGT.txt``);
the first symbol that differs is named, with its index and both files. Where none is found,
the embedding sizes are compared with the corpus's dictionaries, and the command says that
only they were.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from .settings import Settings

if TYPE_CHECKING:
    from ...plugin.convert_source import Source

_STACKS = {"source": "encoder", "target": "decoder"}
_PREPARE = ("prepare it in the checkpoint's vocabulary: posenc-prepare-corpus with the "
            "checkpoint's subword model (--bpe-codes or --spm-model) and --srcdict/--tgtdict "
            "or --joined-dictionary (docs/prepare-corpus.md)")


def check(source: "Source", settings: Settings, given: Sequence[Path] = ()) -> str:
    """Compare the checkpoint's dictionaries with the corpus's (the module docstring);
    :class:`SystemExit` naming the first difference and what to do. The line that says
    what was compared."""
    from ...plugin.position_args import uses_segments

    corpus = {side: Path(settings.data) / "bin" / f"dict.{lang}.txt"
              for side, lang in (("source", settings.source_lang),
                                 ("target", settings.target_lang))}
    # the separator's row is added by the model, not the dictionary file
    extra = 1 if uses_segments(source.args) else 0
    rows = {side: source.state["model"][f"{stack}.embed_tokens.weight"].shape[0] - extra
            for side, stack in _STACKS.items()}
    found, looked = _dictionaries(source, settings, given)
    if found is None:
        for side in _STACKS:
            types = len(_symbols(corpus[side]))
            if types != rows[side]:
                raise SystemExit(
                    f"posenc-compare: --init-from {source.path}: its {_STACKS[side]} embeds "
                    f"{rows[side]:,} types, but the corpus's {side} dictionary {corpus[side]} "
                    f"holds {types:,}: the corpus is not in the checkpoint's vocabulary; "
                    + _PREPARE)
        return (f"note: --init-from {source.path} holds no dictionary and none was found "
                f"({looked}): only the embedding sizes were compared ({rows['source']:,} "
                f"source and {rows['target']:,} target types, as the corpus's dictionaries "
                "hold); give the checkpoint's dictionaries with --init-dict SRC [TGT] to "
                "compare their symbols")
    for side in _STACKS:
        theirs, ours = _symbols(found[side]), _symbols(corpus[side])
        if len(theirs) != rows[side]:
            raise SystemExit(
                f"posenc-compare: --init-from {source.path}: {found[side]} holds "
                f"{len(theirs):,} types but the checkpoint's {_STACKS[side]} embeds "
                f"{rows[side]:,}: it is not the checkpoint's {side} dictionary; give the one "
                "it was trained with: --init-dict SRC [TGT]")
        first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b),
                     None if len(theirs) == len(ours) else min(len(theirs), len(ours)))
        if first is not None:
            def at(symbols: list[str]) -> str:
                return repr(symbols[first]) if first < len(symbols) else "nothing (it ends)"

            raise SystemExit(
                f"posenc-compare: --init-from {source.path}: its {side} dictionary and the "
                f"corpus's differ first at symbol {first}: {at(theirs)} in {found[side]}, "
                f"{at(ours)} in {corpus[side]} ({len(theirs):,} and {len(ours):,} types): "
                "the corpus is not in the checkpoint's vocabulary; " + _PREPARE)
    return (f"--init-from: the checkpoint's dictionaries ({found['source']}, "
            f"{found['target']}) and the corpus's are the same, symbol for symbol")


def _symbols(path: Path) -> list[str]:
    """Every symbol of a fairseq dictionary file, as fairseq reads it (its specials first)."""
    from fairseq.data import Dictionary

    try:
        return list(Dictionary.load(str(path)).symbols)
    except (OSError, ValueError, RuntimeError) as error:
        raise SystemExit(f"posenc-compare: {path} is no fairseq dictionary ({error}): give "
                         "the dict.LANG.txt that fairseq-preprocess wrote") from None


def _dictionaries(source: "Source", settings: Settings, given: Sequence[Path]
                  ) -> tuple[Optional[dict[str, Path]], str]:
    """The checkpoint's dictionaries by side, found as the module docstring says (None:
    none), and where they were looked for."""
    if given:
        missing = [p for p in given if not Path(p).is_file()]
        if missing:
            raise SystemExit(f"posenc-compare: --init-dict {missing[0]}: no such file; give the "
                             "checkpoint's dictionaries (dict.LANG.txt), one file if joined")
        return {"source": Path(given[0]), "target": Path(given[-1])}, "--init-dict"
    task = source.task
    langs = (task.get("source_lang") or settings.source_lang,
             task.get("target_lang") or settings.target_lang)
    places = []
    data = task.get("data")
    if isinstance(data, str) and data:
        places.append(Path(data.split(os.pathsep)[0]))
    places.append(source.path.parent)
    for place in places:
        files = {side: place / f"dict.{lang}.txt" for side, lang in zip(_STACKS, langs)}
        if all(f.is_file() for f in files.values()):
            return files, str(place)
    looked = " or ".join(str(p / f"dict.{{{','.join(langs)}}}.txt") for p in places)
    return None, f"no {looked}"
