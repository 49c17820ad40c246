"""ExPerT: explainable reference-based evaluation of personalized text (Salemi et al., 2025).

Each output of a system is compared with the user's own text (the reference) in four steps, all
through the engine and batched over every instance (example x system):

1. **Extract** atomic aspects ``{title, description, evidence}`` from the reference and from the
   output (structured output under a JSON schema). The reference of an example is extracted once
   and shared by its systems.
2. **Match** every reference aspect against all output aspects in one call (recall side) and every
   output aspect against all reference aspects (precision side); the answer is a number or "none".
3. **Align** the evidences of each matched pair in content and in writing style: a yes/no with a
   one-sentence reason, "list 1" being the side scored.
4. **Score**: five aggregations x (recall, precision, F1) (``persetrain.metrics.expert``).

Two paths for the closed-set steps (``mode``):

* ``choice_probs`` (default): the match is the most probable of the numbers and "none" after
  ``{"match": "``; an alignment is generated up to its reason and the decision is the more probable
  of "yes" / "no" right after it. Nothing is parsed, and the hf backend scores the decision from
  the KV states the reason left behind.
* ``text``: the paper's protocol — the model writes the whole JSON object and it is parsed.

Both ask the same prompt and read the answer at the same position, so under greedy decoding they
agree wherever the greedy token is the most probable choice (``benchmarks/evaluators.py`` measures
both the agreement and the speed-up).

With ``scorer`` (``rm:PATH`` or ``verifier:MODEL``) a trained judge decides the match step instead:
each aspect is read as a rule and every aspect of the other side as a candidate that follows it or not
(``ExPerTConfig.scorer``), as PREF's stage 3 and AuPEL's comparisons take one.

Failures follow the paper's code: an extraction is retried with the temperature raised by
``retry_temperature_step`` (up to ``max_retries`` retries) and, if it still fails, the instance is
kept as ``Judgment(parsed=False)``; a match or alignment step that still fails after its retries
counts as unmatched / not aligned and is counted in ``details["failures"]``. A side with no aspects
scores 0 (the package's behaviour), recorded in ``details["no_aspects"]``.

The cost of an instance is everything it takes to score that output from scratch, the reference's
extraction included (as the paper's 18.6 calls per instance counts it).

This module is the evaluator; the pipeline and its configuration are in ``evaluators.expert_pipeline``, the
reading of the model's answers in ``evaluators.expert_parsing``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from persetrain.engine import Engine
from persetrain.evaluators.base import REFERENCE, DataNeeds, JudgeContext, register
from persetrain.evaluators.expert_pipeline import ExPerTConfig, ExPerTJudge
from persetrain.evaluators.scorers import WithTrainedScorer
from persetrain.io import InputError
from persetrain.metrics.expert import AGGREGATIONS
from persetrain.schema import Judgment, ReferenceExample


def check_reference_examples(examples: Sequence[ReferenceExample], data: Path | str, need_reference: bool) -> list[str]:
    """The systems every record holds; a record missing one, or without a reference, is named."""
    systems = list(dict.fromkeys(s for ex in examples for s in ex.outputs))
    for ex in examples:
        if need_reference and not ex.reference.strip():
            raise InputError(
                data,
                "ExPerT compares outputs with the user's own text, and this record has none",
                record=ex.id,
                field="reference",
            )
        missing = [s for s in systems if s not in ex.outputs]
        if missing:
            raise InputError(
                data,
                f"no output of system(s) {', '.join(missing)} (other records have them)",
                record=ex.id,
                field="outputs",
            )
    return systems


@register("expert")
class ExPerT(WithTrainedScorer):
    tasks = ("reference",)
    Config = ExPerTConfig
    needs = DataNeeds(fields=(REFERENCE,))

    def judge(
        self, examples: Sequence[ReferenceExample], engine: Engine | None, context: JudgeContext
    ) -> list[Judgment]:
        check_reference_examples(examples, context.data, need_reference=True)
        if self.config.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {self.config.aggregation!r}; use one of {list(AGGREGATIONS)}")
        scorer = self.trained_scorer() if self.config.scorer else None
        return ExPerTJudge(engine, self.config, context.system, scorer, context).run(examples)

    def report(
        self, out: Path, examples: Sequence, judgments: Mapping[str, list[Judgment]], metrics: Mapping[str, dict]
    ) -> dict[str, str]:
        return {
            f"ExPerT explanations: {name}": explanation_tables(found, self.config.examples_in_report)
            for name, found in judgments.items()
        }


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def explanation_tables(judgments: Sequence[Judgment], k: int = 3) -> str:
    """A few instances as aspect tables: each aspect, its match, and the content and style verdicts with reasons."""
    blocks = []
    for j in [j for j in judgments if j.parsed][:k]:
        lines = [f"**{j.example_id}**, output of **{j.target}**: {j.explanation}", ""]
        for side, label in (("recall", "reference aspect"), ("precision", "output aspect")):
            lines += [f"| {label} | matched aspect | content | style |", "|---|---|---|---|"]
            for r in j.details[side]:
                matched = r["matched_aspect"]
                verdicts = [
                    f"{'yes' if r[kind] else 'no'}: {_cell(r[f'{kind}_reason'])}" if matched is not None else "—"
                    for kind in ("content", "style")
                ]
                lines.append(
                    f"| {_cell(r['aspect'])} | {_cell(matched) if matched is not None else 'none'} | "
                    + " | ".join(verdicts)
                    + " |"
                )
            lines.append("")
        failures = {k: v for k, v in j.details["failures"].items() if v}
        if failures or j.details["no_aspects"]:
            lines.append(
                f"Failed steps (counted as unmatched / not aligned): {failures or 'none'}; "
                f"sides without aspects: {j.details['no_aspects'] or 'none'}"
            )
        blocks.append("\n".join(lines))
    unparsed = sum(not j.parsed for j in judgments)
    if unparsed:
        blocks.append(f"{unparsed} instance(s) kept unscored: their aspects could not be extracted after the retries.")
    return "\n\n".join(blocks)
