"""The torch core: position encodings, the attention's plan and computation, and the fused
kernels, in torch alone (Triton optional). It imports nothing of the plugin or the tools;
:mod:`fairseq_posenc.nn` is its public face."""
