"""Readers of the raw formats (MPST, DOC, Amazon 2018, PrefEval), shared by the pipelines that build on them."""
