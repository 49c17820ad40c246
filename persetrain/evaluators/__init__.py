"""Every evaluator module, imported so that its ``@register`` runs (see ``evaluators/base.py``)."""

from persetrain.evaluators import (  # noqa: F401
    aupel,
    baselines,
    expert,
    judges,
    lexical,
    mcq_letter,
    odd_one_out,
    parl,
    perse,
    pref,
    rm,
    verifier,
)
