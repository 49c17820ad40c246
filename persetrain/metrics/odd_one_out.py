"""How unlike the other candidates each candidate is: the lexical baseline that never reads the person.

PrefEval's distractors tend to be generic answers that resemble each other, while the
preference-following option stands apart. ``oddness`` measures that with TF-IDF cosine similarity
over the candidates of one question only (raw term counts of lower-cased word tokens, smoothed IDF
``ln((1 + n) / (1 + df)) + 1``, L2-normalised rows, as scikit-learn's ``TfidfVectorizer`` defaults),
so a question's scores depend on its own candidates and never on which other questions are judged.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")


def tfidf_matrix(texts: Sequence[str]) -> np.ndarray:
    """One L2-normalised TF-IDF row per text, the vocabulary and IDF taken from ``texts`` themselves."""
    counts = [Counter(_WORD.findall(text.lower())) for text in texts]
    vocabulary = sorted(set().union(*counts))
    index = {word: k for k, word in enumerate(vocabulary)}
    df = Counter(word for c in counts for word in c)
    idf = np.array([math.log((1 + len(texts)) / (1 + df[w])) + 1 for w in vocabulary])
    rows = np.zeros((len(texts), len(vocabulary)))
    for i, c in enumerate(counts):
        for word, n in c.items():
            rows[i, index[word]] = n
    rows *= idf
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def oddness(texts: Sequence[str]) -> list[float]:
    """1 - each text's mean TF-IDF cosine similarity to the others (0: like them all, 1: shares no word)."""
    if len(texts) < 2:
        raise ValueError(f"oddness compares a text with the others; got {len(texts)} text(s)")
    rows = tfidf_matrix(texts)
    similarity = rows @ rows.T
    np.fill_diagonal(similarity, 0.0)
    return (1 - similarity.sum(axis=1) / (len(texts) - 1)).tolist()
