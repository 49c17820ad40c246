"""Reference-based lexical and embedding metrics as evaluators: BLEU, ROUGE-1, ROUGE-L, METEOR, BERTScore.

ExPerT compares personalized evaluators with these (Table 1). They need no language model and judge
only the ``reference`` task: each system's output of an example against the user's own text. One
judgment per output (``target`` = the generator system), its score on the metric's own scale
(BLEU 0-100, the others 0-1). The numbers come from ``persetrain.metrics.text_similarity``
(sacrebleu, rouge-score, nltk, bert-score), so they match the reference implementations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from persetrain.engine import Engine
from persetrain.evaluators.base import REFERENCE, DataNeeds, Evaluator, JudgeContext, register
from persetrain.io import InputError
from persetrain.metrics.text_similarity import bertscore, meteor, rouge_pairs, sentence_bleu
from persetrain.schema import Judgment, ReferenceExample

PairMetric = Callable[[list[str], list[str]], list[float]]


class LexicalMetric(Evaluator):
    """Scores every output of every example against the example's reference with ``metric``."""

    tasks = ("reference",)
    needs_model = False
    needs = DataNeeds(fields=(REFERENCE,))
    #: (hypotheses, references) -> one score per pair.
    metric: PairMetric
    label: str

    def judge(
        self, examples: Sequence[ReferenceExample], engine: Engine | None, context: JudgeContext
    ) -> list[Judgment]:
        pairs = []
        for ex in examples:
            if not ex.reference.strip():
                raise InputError(
                    context.data,
                    f"{self.name} compares outputs with the user's reference, and this example has none",
                    record=ex.id,
                    field="reference",
                )
            pairs += [(ex.id, system, text, ex.reference) for system, text in ex.outputs.items()]
        scores = type(self).metric([p[2] for p in pairs], [p[3] for p in pairs])
        return [
            Judgment(
                example_id=ex_id,
                evaluator=context.system,
                target=system,
                score=score,
                explanation=f"{self.label} against the reference: {score:.4f}",
            )
            for (ex_id, system, _, _), score in zip(pairs, scores, strict=True)
        ]


def _bleu(hypotheses: list[str], references: list[str]) -> list[float]:
    return [sentence_bleu(h, r) for h, r in zip(hypotheses, references, strict=True)]


@register("bleu")
class BLEU(LexicalMetric):
    metric = staticmethod(_bleu)
    label = "sentence BLEU (sacrebleu, 0-100)"


@register("rouge-1")
class Rouge1(LexicalMetric):
    metric = staticmethod(lambda h, r: rouge_pairs(h, r)["rouge1"])
    label = "ROUGE-1 F"


@register("rouge-l")
class RougeL(LexicalMetric):
    metric = staticmethod(lambda h, r: rouge_pairs(h, r)["rougeL"])
    label = "ROUGE-L F"


@register("meteor")
class Meteor(LexicalMetric):
    metric = staticmethod(meteor)
    label = "METEOR (nltk, WordNet 3.0)"


@register("bertscore")
class BERTScore(LexicalMetric):
    metric = staticmethod(lambda h, r: bertscore(h, r)["f1"])
    label = "BERTScore F1 (all-MiniLM-L6-v2, layer 6)"
