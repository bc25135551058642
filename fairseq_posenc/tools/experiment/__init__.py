"""The runner of every experiment: fairseq trained, its checkpoint chosen, every test
sentence translated, and the training log read, the same way for ``posenc-reproduce`` (the
papers' recipes on WMT) and ``posenc-compare`` (a user's corpus).

Modules, one responsibility each:

* :mod:`.fairseq_run` -- ``fairseq-train`` / ``fairseq-generate`` as console scripts or in
  this process, with their output in a log file;
* :mod:`.checkpoints` -- which checkpoint a run evaluates (last, best, or the average of the
  last interval checkpoints) and the training flags that keep them;
* :mod:`.translate` -- the ``fairseq-generate`` arguments and one test split translated,
  every hypothesis in order, detokenized;
* :mod:`.trainlog` -- speed, validation losses and updates read from ``fairseq-train``'s log;
* :mod:`.user_dir` -- a user's own ``--user-dir`` (their encodings), checked and imported.

Importing this package loads neither torch nor fairseq; its modules load them when they run.
"""
