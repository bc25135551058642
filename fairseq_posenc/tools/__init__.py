"""The command-line tools (``posenc-compare``, ``posenc-convert``, ``posenc-prepare-wmt``,
``posenc-reproduce``, ``posenc-benchmark``, ``posenc-kernels``, ``posenc-score``,
``posenc-inspect``, ...) and what they share: the text pipeline, the fairseq runner, the
launchers. They use the plugin and the core; nothing below imports them."""
