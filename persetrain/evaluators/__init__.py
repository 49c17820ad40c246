"""Every evaluator module, imported so that its ``@register`` runs (see ``evaluators/base.py``)."""

from persetrain.evaluators import baselines, perse  # noqa: F401
