"""``posenc-compare``: a position-encoding ablation on your own corpus, with a report.

    posenc-compare OUT --data DIR -s en -t de --encodings sinusoidal t5 rope --seeds 3

Every encoding trains with the same data, settings and seed ``k`` for its ``k``-th run,
translates every test split with beam 10 and length penalty 0.6, and is scored with
sacreBLEU against the baseline (the first encoding unless ``--baseline``). The parts:

* :mod:`.settings` -- what a comparison is (``OUT/settings.json``), and what may change
  between reruns into the same ``OUT``;
* :mod:`.data` -- raw text prepared once (cleaned, tokenized, BPE, binarized), or a
  prepared directory read as it is; the checks that stop bad input before any training;
* :mod:`.plan` -- the runs (encoding x seed), their paths (kept relative to ``OUT``) and
  ``fairseq-train`` arguments;
* :mod:`.fairseq_flags` -- ``--train-args`` and ``--variants`` checked by fairseq's own
  parsers before any work;
* :mod:`.stopping` -- how each run validates, saves and stops (``--max-update``,
  ``--max-epoch``, ``--until-converged``), and where and why it stopped;
* :mod:`.placement` -- where each run trained, and whether their speeds compare;
* :mod:`.execute` -- training, translation, scoring and inspection of each run, resumable,
  through the runner that ``posenc-reproduce`` uses (:mod:`fairseq_posenc.tools.experiment`);
* :mod:`.convergence` -- whether each run was still improving when its training stopped,
  and the report's marker of a difference that may be training speed;
* :mod:`.budget` -- a larger ``--max-update`` on a finished comparison: its runs continue;
* :mod:`.summary` and :mod:`.report` -- ``report.json``, ``report.md`` and the offline
  ``report/index.html``;
* :mod:`.length_bins` -- each test split's bins by source and by reference length, the same
  for every row, and each row's scores in them;
* :mod:`.extrapolation_study` -- ``--train-max-len``: the training pairs kept and dropped, the
  test splits scored in bins relative to the limit, their tables and plots;
* :mod:`.variants` -- ``--variants``: an encoding's checkpoints translated with more
  ``fairseq-generate`` flags (RoPE's rescalings), rows of their own;
* :mod:`.init_from` and :mod:`.init_dictionaries` -- ``--init-from CKPT``: every row
  fine-tuned from one trained checkpoint converted to its encoding, and the checkpoint's
  dictionaries against the data's;
* :mod:`.cli` -- the command line.

``docs/compare.md`` explains the report.
"""
