"""Tests of the torch core (fairseq_posenc/core/, fairseq_posenc/nn.py)."""
