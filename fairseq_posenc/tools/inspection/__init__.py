"""``posenc-inspect``: pictures of what a trained model's position encoding does.

Modules, by responsibility: :mod:`.load` (checkpoint -> model), :mod:`.term_pictures`
(what each position term adds, as :mod:`.records` computed by the terms' own methods),
:mod:`.sentence` (raw text -> tokens -> attention maps), :mod:`.captions` (the words),
:mod:`.plots` (matplotlib), :mod:`.report` (PNG + JSON + index.html), :mod:`.cli`.
Importing this package or :mod:`.cli` loads neither torch nor fairseq; :mod:`.load`
registers the plugin (``fairseq_posenc.register``) before it reads a checkpoint, and only
:mod:`.plots` imports matplotlib.
"""
