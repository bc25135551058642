"""The fairseq plugin: the ``transformer_posenc`` model, its architectures, tasks and
checkpoint loading, on the torch core (:mod:`fairseq_posenc.core`). It imports the core and
fairseq, nothing of the tools; :func:`fairseq_posenc.register` registers it."""
