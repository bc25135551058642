"""The text pipeline that every preparation shares: ``posenc-prepare-wmt`` (the papers'
corpora), ``posenc-prepare-corpus`` (any parallel corpus), ``posenc-compare``, and the
tools that detokenize or encode new text. :mod:`.text`: tokenization with joiner marks,
cleaning, subword models, binarization and the inverse; :mod:`.files`: atomic outputs,
line hygiene, checksums, step stamps and the error a user can act on."""
