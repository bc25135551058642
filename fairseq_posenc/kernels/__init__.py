"""Triton kernels for position terms that ``torch``'s fused attention cannot run exactly
without a ``len x len`` tensor. Imported only where used: Triton is optional on CPU."""
