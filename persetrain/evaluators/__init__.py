"""Every evaluator module, imported so that its ``@register`` runs (see ``evaluators/base.py``)."""

from persetrain.evaluators import aupel, baselines, expert, judges, lexical, mcq_letter, parl, perse, pref  # noqa: F401
