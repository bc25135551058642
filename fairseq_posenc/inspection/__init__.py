"""``posenc-inspect``: pictures of what a trained model's position encoding does.

Modules, by responsibility: :mod:`.load` (checkpoint -> model), :mod:`.terms` (what each
position term adds, as :mod:`.records` computed by the terms' own methods),
:mod:`.sentence` (raw text -> tokens -> attention maps), :mod:`.captions` (the words),
:mod:`.plots` (matplotlib), :mod:`.report` (PNG + JSON + index.html), :mod:`.cli`.
Importing this package registers the plugin's model (``fairseq_posenc``) but not
matplotlib, which only :mod:`.plots` imports.
"""
