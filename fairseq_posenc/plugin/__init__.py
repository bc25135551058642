"""The fairseq plugin: the ``transformer_posenc`` model, its architectures, tasks,
checkpoint loading and the conversion of trained checkpoints (:mod:`.convert`), on the torch
core (:mod:`fairseq_posenc.core`). It imports the core and fairseq, nothing of the tools;
:func:`fairseq_posenc.register` registers it."""
