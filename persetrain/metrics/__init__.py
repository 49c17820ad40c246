"""Pure metric functions: every number in a report comes from here (no LLM is called)."""

from persetrain.metrics.calibration import (
    Calibration,
    apply_calibration,
    fit_quantile_calibration,
    linear_calibration,
)
from persetrain.metrics.correlation import bootstrap_ci, correlations
from persetrain.metrics.pairwise import accuracy, pairwise_accuracy
from persetrain.metrics.text_similarity import (
    bertscore,
    corpus_bleu,
    rouge,
    sentence_bleu,
    similarity_summary,
)

__all__ = [
    "Calibration",
    "accuracy",
    "apply_calibration",
    "bertscore",
    "bootstrap_ci",
    "corpus_bleu",
    "correlations",
    "fit_quantile_calibration",
    "linear_calibration",
    "pairwise_accuracy",
    "rouge",
    "sentence_bleu",
    "similarity_summary",
]
