"""Tests of the fairseq plugin (fairseq_posenc/plugin/)."""
