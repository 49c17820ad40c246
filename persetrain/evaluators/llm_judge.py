"""Baseline LLM judges that score one response at a time: GEMBA, G-Eval and PARL's LLM-as-a-judge.

* GEMBA (Kocmi & Federmann, 2023; ExPerT's setting): one greedy 0..4 score per response.
  ``scoring="choice_probs"`` reads the expected score from the model's distribution over "0".."4"
  instead of the sampled digit.
* G-Eval (Liu et al., 2023; ExPerT's setting): 20 samples at temperature 1; the score is the mean
  of the sampled scores (each score weighted by how often it was drawn). It also writes
  ``NAME-exact``: the same weighting with the model's exact probabilities from ``choice_probs``.
* LLM-as-a-judge (PARL, Appendix I): the user's history, the task input and the text, a 1..5 score;
  expected value from ``choice_probs`` (the answer is a closed set).

They judge two task kinds. ``reference``: every system's output of an example against the user's
reference (GEMBA, G-Eval) or the user's writing samples (LLM judge); one judgment per output, its
``target`` the generator system, its ``score`` on the method's own scale. ``mcq``: every option of
a question, with the user's preference in place of a reference; one judgment per question whose
``details["scores"]`` are the option scores mapped linearly onto 0..10, the scale of the
multiple-choice metrics. Responses and references are cut to ``max_tokens`` tokens (512, as ExPerT
does for these baselines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from persetrain.engine import ChatRequest, Cost, Engine, GenerationParams
from persetrain.evaluators.base import Evaluator, EvaluatorConfig, JudgeContext, register
from persetrain.evaluators.pairs import is_pairs, judge_pairs, refuse_plot_pairs
from persetrain.metrics.mcq import strict_argmax
from persetrain.person import stated
from persetrain.prompts import render
from persetrain.prompts.llm_judge import GEMBA_RANGE, LLM_JUDGE_RANGE
from persetrain.prompts.pref import SCORE_MAX
from persetrain.schema import Judgment, McqExample, ReferenceExample


@dataclass
class Item:
    """One response to score: which example and which of its candidates, and the prompt's fields."""

    example_id: str
    target: str
    values: dict[str, str]


def truncate(text: str, max_tokens: int, engine: Engine | None) -> str:
    """The first ``max_tokens`` tokens of ``text`` under the judge's tokenizer (words for a served model)."""
    tokenizer = getattr(getattr(engine, "backend", None), "tokenizer", None)
    if tokenizer is None:
        words = text.split()
        return text if len(words) <= max_tokens else " ".join(words[:max_tokens])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text if len(ids) <= max_tokens else tokenizer.decode(ids[:max_tokens])


def items_of(examples: Sequence, engine: Engine | None, max_tokens: int, needs_reference: bool) -> list[Item]:
    """Every response of every example, with the fields the prompts need."""
    items = []
    for ex in examples:
        if isinstance(ex, McqExample):
            items += [
                Item(
                    ex.id,
                    str(k),
                    {
                        "input": ex.question,
                        "preference": stated(ex.preference),
                        "history": stated(ex.preference),
                        "response": truncate(option, max_tokens, engine),
                    },
                )
                for k, option in enumerate(ex.options)
            ]
        elif isinstance(ex, ReferenceExample):
            if needs_reference and not ex.reference.strip():
                raise ValueError(f"example {ex.id!r} has no reference; this judge compares outputs with one")
            history = stated("\n\n".join(truncate(s, max_tokens, engine) for s in ex.profile))
            items += [
                Item(
                    ex.id,
                    system,
                    {
                        "input": ex.input,
                        "reference": truncate(ex.reference, max_tokens, engine),
                        "history": history,
                        "response": truncate(text, max_tokens, engine),
                    },
                )
                for system, text in ex.outputs.items()
            ]
        else:
            raise ValueError(f"cannot judge a {type(ex).__name__}; these judges take mcq and reference examples")
    return items


def to_ten(score: float | None, low: int, high: int) -> float | None:
    """A score on ``low..high`` mapped linearly onto the multiple-choice metrics' 0..10."""
    return None if score is None else SCORE_MAX * (score - low) / (high - low)


def collect(
    examples: Sequence,
    items: Sequence[Item],
    scores: Sequence[float | None],
    costs: Sequence[Cost],
    explanations: Sequence[str],
    raws: Sequence[str],
    system: str,
    scale: tuple[int, int],
) -> list[Judgment]:
    """Judgments in the shape each task kind expects (see the module docstring)."""
    judgments = []
    by_example: dict[str, list[int]] = {}
    for k, item in enumerate(items):
        by_example.setdefault(item.example_id, []).append(k)
    for ex in examples:
        mine = by_example[ex.id]
        if isinstance(ex, McqExample):
            native = [scores[k] for k in mine]
            parsed = all(s is not None for s in native)
            ten = [to_ten(s, *scale) for s in native] if parsed else None
            judgments.append(
                Judgment(
                    example_id=ex.id,
                    evaluator=system,
                    parsed=parsed,
                    choice=None if strict_argmax(ten) is None else str(strict_argmax(ten)),
                    details={"scores": ten, "native_scores": native, "scale": list(scale)},
                    explanation="\n".join(f"option {items[k].target}: {explanations[k]}" for k in mine),
                    raw="\n".join(raws[k] for k in mine),
                    cost=sum((costs[k] for k in mine), Cost()),
                )
            )
        else:
            judgments += [
                Judgment(
                    example_id=ex.id,
                    evaluator=system,
                    target=items[k].target,
                    score=scores[k],
                    parsed=scores[k] is not None,
                    explanation=explanations[k],
                    raw=raws[k],
                    cost=costs[k],
                )
                for k in mine
            ]
    return judgments


def digit_regex(low: int, high: int) -> str:
    return f"[{low}-{high}]\\}}"


def sampled_scores(
    engine: Engine,
    requests: Sequence[ChatRequest],
    scale: tuple[int, int],
    samples: int,
    temperature: float,
    description: str,
) -> tuple[list[list[int | None]], list[Cost], list[str]]:
    """``samples`` structured answers per request (a digit and the closing brace), read as integers."""
    low, high = scale
    draws: list[list[int | None]] = [[] for _ in requests]
    costs = [Cost() for _ in requests]
    texts: list[list[str]] = [[] for _ in requests]
    for seed in range(samples):
        params = GenerationParams(max_new_tokens=4, temperature=temperature, seed=seed, regex=digit_regex(low, high))
        label = description if samples == 1 else f"{description} (sample {seed + 1}/{samples})"
        for k, g in enumerate(engine.generate(requests, params, description=label)):
            text = g.text.strip().rstrip("}").strip()
            draws[k].append(int(text) if text.isdigit() and low <= int(text) <= high else None)
            costs[k] = costs[k] + g.cost
            texts[k].append(g.text)
    return draws, costs, ["|".join(t) for t in texts]


def expected_scores(
    engine: Engine, requests: Sequence[ChatRequest], scale: tuple[int, int], description: str
) -> tuple[list[float], list[Cost], list[dict[str, float]]]:
    probs = engine.choice_probs(requests, [str(n) for n in range(scale[0], scale[1] + 1)], description=description)
    return [p.expectation() for p in probs], [p.cost for p in probs], [p.probs for p in probs]


def _prob_text(probs: dict[str, float]) -> str:
    return "P(score): " + ", ".join(f"{k} {v:.3f}" for k, v in probs.items())


@dataclass
class GEMBAConfig(EvaluatorConfig):
    #: ``text``: the greedy digit (the paper); ``choice_probs``: the expected score over "0".."4".
    scoring: Literal["text", "choice_probs"] = "text"
    #: Tokens kept of each response and reference (ExPerT: 512).
    max_tokens: int = 512


@register("gemba")
class GEMBA(Evaluator):
    """Pointwise 0..4 judge, greedy."""

    tasks = ("mcq", "reference")
    Config = GEMBAConfig

    def judge(self, examples: Sequence, engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        config: GEMBAConfig = self.config
        items = items_of(examples, engine, config.max_tokens, needs_reference=True)
        requests = [render("gemba", "mcq" if "preference" in it.values else "reference", **it.values) for it in items]
        if config.scoring == "choice_probs":
            scores, costs, probs = expected_scores(engine, requests, GEMBA_RANGE, f"{context.system}: scores")
            explanations, raws = [_prob_text(p) for p in probs], [""] * len(items)
        else:
            draws, costs, raws = sampled_scores(engine, requests, GEMBA_RANGE, 1, 0.0, f"{context.system}: scores")
            scores = [d[0] for d in draws]
            explanations = [f"score {s}" if s is not None else "no score" for s in scores]
        return collect(examples, items, scores, costs, explanations, raws, context.system, GEMBA_RANGE)


@dataclass
class GEvalConfig(EvaluatorConfig):
    #: Sampled scores per response (G-Eval: 20).
    samples: int = 20
    #: Sampling temperature (G-Eval: 1).
    temperature: float = 1.0
    #: Also write ``NAME-exact``: the expected score from the model's exact probabilities.
    exact: bool = True
    #: Tokens kept of each response and reference (ExPerT: 512).
    max_tokens: int = 512


@register("g-eval")
class GEval(Evaluator):
    """Probability-weighted 0..4 score: estimated from samples, and exactly from ``choice_probs``."""

    tasks = ("mcq", "reference")
    Config = GEvalConfig

    def judge(self, examples: Sequence, engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        config: GEvalConfig = self.config
        if config.samples < 1:
            raise ValueError(f"g-eval needs samples >= 1, got {config.samples}")
        items = items_of(examples, engine, config.max_tokens, needs_reference=True)
        requests = [render("gemba", "mcq" if "preference" in it.values else "reference", **it.values) for it in items]
        draws, costs, raws = sampled_scores(
            engine, requests, GEMBA_RANGE, config.samples, config.temperature, f"{context.system}: samples"
        )
        scores, explanations = [], []
        for d in draws:
            read = [s for s in d if s is not None]
            scores.append(sum(read) / len(read) if read else None)
            counts = {s: read.count(s) for s in sorted(set(read))}
            explanations.append(f"{len(read)} of {len(d)} samples read; counts {counts}")
        judgments = collect(examples, items, scores, costs, explanations, raws, context.system, GEMBA_RANGE)
        if config.exact:
            exact, exact_costs, probs = expected_scores(engine, requests, GEMBA_RANGE, f"{context.system}: exact")
            judgments += collect(
                examples,
                items,
                exact,
                exact_costs,
                [_prob_text(p) for p in probs],
                [""] * len(items),
                f"{context.system}-exact",
                GEMBA_RANGE,
            )
        return judgments


@dataclass
class LLMJudgeConfig(EvaluatorConfig):
    #: Tokens kept of each writing sample and response.
    max_tokens: int = 512


@register("llm-judge")
class LLMJudge(Evaluator):
    """PARL's reference-free 1..5 judge over the user's history; expected score from ``choice_probs``. A
    preference row is judged as a two-option question (``persetrain.evaluators.pairs``)."""

    tasks = ("mcq", "pairwise", "reference")
    Config = LLMJudgeConfig

    def judge(self, examples: Sequence, engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        if is_pairs(examples):
            return judge_pairs(lambda questions: self.judge(questions, engine, context), examples)
        refuse_plot_pairs(examples, "llm-judge")
        config: LLMJudgeConfig = self.config
        items = items_of(examples, engine, config.max_tokens, needs_reference=False)
        requests = [
            render(
                "llm-judge",
                "pointwise",
                history=it.values["history"],
                input=it.values["input"],
                response=it.values["response"],
            )
            for it in items
        ]
        scores, costs, probs = expected_scores(engine, requests, LLM_JUDGE_RANGE, f"{context.system}: scores")
        return collect(
            examples,
            items,
            scores,
            costs,
            [_prob_text(p) for p in probs],
            [""] * len(items),
            context.system,
            LLM_JUDGE_RANGE,
        )
