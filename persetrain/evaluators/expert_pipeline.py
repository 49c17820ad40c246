"""ExPerT's pipeline over a batch (the method is described in ``evaluators.expert``): its configuration, and
the extract, match, align and score steps that turn every (example, system) instance into a Judgment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from persetrain.engine import ChatRequest, Cost, Engine, GenerationParams
from persetrain.engine.retry import Parsed, RetrySchedule, generate_parsed, none_on_error
from persetrain.evaluators.base import EvaluatorConfig, JudgeContext
from persetrain.evaluators.expert_parsing import cut_words, parse_aspects, parse_json_field, refuse_unfinished
from persetrain.evaluators.learned import Item
from persetrain.evaluators.scorers import TrainedScorer, grouped_scores
from persetrain.metrics.expert import DEFAULT, expert_scores
from persetrain.prompts.expert import (
    ALIGN_KEY,
    MATCH_PREFIX,
    NO,
    NONE,
    REASON_PREFIX,
    YES,
    alignment_request,
    alignment_schema,
    aspects_schema,
    extract_request,
    match_choices,
    match_request,
    match_schema,
    reason_regex,
)
from persetrain.prompts.preference import PERSON_LABELS
from persetrain.schema import Judgment, ReferenceExample

SIDES = ("recall", "precision")


@dataclass
class ExPerTConfig(EvaluatorConfig):
    #: How closed-set steps are answered: ``choice_probs`` (read the answer's probabilities) or
    #: ``text`` (generate the JSON answer and parse it, the paper's protocol).
    mode: Literal["choice_probs", "text"] = "choice_probs"
    #: Which aggregation's F1 becomes ``Judgment.score`` (all 15 numbers are always in ``details``).
    aggregation: Literal[
        "content_only", "style_only", "content_and_style", "content_or_style", "content_style_average"
    ] = DEFAULT
    #: At most this many aspects per text (the schema's ``maxItems``); also bounds matching calls.
    max_aspects: int = 6
    #: At most this many evidence sentences per aspect.
    max_evidence: int = 3
    #: Texts are cut to this many words before extraction (the package cuts outputs to 512 tokens).
    max_text_words: int = 400
    #: Token budget of one extraction answer.
    extract_tokens: int = 768
    #: Characters of a reason (match reasons in ``text`` mode, alignment reasons in both).
    reason_chars: int = 200
    #: Token budget of one match or alignment answer.
    answer_tokens: int = 96
    #: Retries of a step whose answer cannot be read, each at a temperature ``retry_temperature_step``
    #: higher (the package starts at 0 and adds 0.1 per attempt).
    max_retries: int = 3
    retry_temperature_step: float = 0.1
    #: Seed of the sampled retries.
    seed: int = 0
    #: Instances rendered as aspect tables in report.md.
    examples_in_report: int = 3
    #: A trained judge that decides the match step instead of the model (``rm:PATH`` or ``verifier:MODEL``,
    #: ``evaluators.scorers``): each aspect is read as a rule and every aspect of the other side as a candidate
    #: that follows it or not. Extraction and alignment stay with the model.
    scorer: str | None = None
    #: With ``scorer``: the best candidate matches when the judge's probability that it follows the aspect
    #: (p(yes), or a reward model's sigmoid) is at least this; otherwise the answer is "none".
    match_threshold: float = 0.5


def aspect_text(aspect: dict) -> str:
    """An aspect as a trained scorer reads it: its title and description, then its evidence."""
    return f"{aspect['title']}: {aspect['description']}\nEvidence: {' '.join(aspect['evidence'])}"


class _Step:
    """One closed-set question of one instance: where its answer goes and what it cost."""

    def __init__(
        self, owner: int, side: str, index: int, request: ChatRequest, choices: list[str], kind: str = "match"
    ):
        self.owner, self.side, self.index, self.request = owner, side, index, request
        self.choices, self.kind = choices, kind
        self.aspect: dict | None = None  # a match step's own aspect and the other side's, for a trained scorer
        self.candidates: list[dict] = []
        self.answer: str | None = None
        self.reason = ""
        self.probs: dict[str, float] | None = None
        self.cost = Cost()


class ExPerTJudge:
    """The pipeline over a batch of instances; ``run`` returns one Judgment per (example, system)."""

    def __init__(
        self,
        engine: Engine,
        config: ExPerTConfig,
        name: str,
        scorer: TrainedScorer | None = None,
        context: JudgeContext | None = None,
    ):
        """``scorer`` (with the ``context`` it scores in) decides the match step; see ``ExPerTConfig.scorer``."""
        self.engine, self.config, self.name = engine, config, name
        self.scorer, self.context = scorer, context

    # ------------------------------------------------------------------ retried generation
    def _generate_retried(
        self,
        requests: list[ChatRequest],
        params: list[GenerationParams],
        parse: Callable[[str], object] | list[Callable[[str], object]],
        description: str,
    ) -> list[Parsed]:
        """(parsed value or None, last text, summed cost, tries) per request, retrying failures.

        ``parse`` (one for all requests, or one per request) raises ValueError on an unreadable answer. The
        first try is greedy (seeded with ``seed``, which greedy decoding ignores); retry k samples at
        ``k * retry_temperature_step`` with seed ``seed + k``.
        """
        c = self.config
        parsers = [none_on_error(p) for p in parse] if isinstance(parse, list) else none_on_error(parse)
        schedule = RetrySchedule(tries=c.max_retries + 1, temperature=0.0, temperature_step=c.retry_temperature_step)
        seeded = [p.model_copy(update={"temperature": 0.0, "seed": c.seed}) for p in params]
        return generate_parsed(self.engine, requests, seeded, parsers, schedule, description)

    # ------------------------------------------------------------------ steps
    def extract(self, items: list[tuple[str, str]]) -> list[Parsed]:
        """Aspects of each distinct (task input, text)."""
        c = self.config
        schema = aspects_schema(c.max_aspects, c.max_evidence)
        requests = [extract_request(inp, cut_words(text, c.max_text_words), c.max_aspects) for inp, text in items]
        params = [GenerationParams(max_new_tokens=c.extract_tokens, json_schema=schema)] * len(requests)
        return self._generate_retried(requests, params, parse_aspects, f"{self.name}: aspects")

    def answer(self, steps: list[_Step], description: str) -> None:
        """Fill ``answer`` / ``reason`` / ``probs`` / ``cost`` of each step (matching or alignment)."""
        if not steps:
            return
        c = self.config
        if c.mode == "text":
            params = [
                GenerationParams(
                    max_new_tokens=c.answer_tokens,
                    json_schema=(
                        match_schema(s.choices, c.reason_chars)
                        if s.kind == "match"
                        else alignment_schema(c.reason_chars)
                    ),
                )
                for s in steps
            ]
            field = "match" if steps[0].kind == "match" else "aligned"
            parsers = [partial(parse_json_field, field=field, allowed=s.choices) for s in steps]
            parsed = self._generate_retried([s.request for s in steps], params, parsers, description)
            for step, (answer, _, cost, _) in zip(steps, parsed, strict=True):
                step.cost = cost
                if answer is not None:  # None: failed after the retries, so unmatched / not aligned
                    step.answer, step.reason = answer
            return
        prefixed: list[ChatRequest] = []
        live: list[_Step] = []
        if steps[0].kind == "match":
            prefixed = [s.request.model_copy(update={"assistant_prefix": MATCH_PREFIX}) for s in steps]
            live = list(steps)
        else:  # the reason first, then the decision scored right after it
            params = [GenerationParams(max_new_tokens=c.answer_tokens, regex=reason_regex(c.reason_chars))] * len(steps)
            done = self._generate_retried(
                [s.request for s in steps],
                params,
                lambda text: text if text.endswith(ALIGN_KEY) else refuse_unfinished(text),
                f"{description} reasons",
            )
            for step, (text, _, cost, _) in zip(steps, done, strict=True):
                step.cost = cost
                if text is None:
                    continue  # no reason after the retries: not aligned, counted as a failure
                step.reason = text.removeprefix(REASON_PREFIX).removesuffix(ALIGN_KEY)
                prefixed.append(step.request.model_copy(update={"assistant_prefix": text}))
                live.append(step)
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, step in enumerate(live):
            groups.setdefault(tuple(step.choices), []).append(i)
        for choices, members in groups.items():
            probs = self.engine.choice_probs([prefixed[i] for i in members], list(choices), description=description)
            for i, p in zip(members, probs, strict=True):
                step = live[i]
                step.probs, step.cost = p.probs, step.cost + p.cost
                step.answer = max(choices, key=lambda ch: p.probs[ch])

    def match_with_scorer(self, steps: list[_Step], inputs: Sequence[str]) -> None:
        """Fill the match steps from the trained scorer: every (aspect, candidate) pair in one call; the most
        probable candidate matches if its probability reaches ``match_threshold``. ``probs`` holds each
        candidate's own probability (they need not sum to 1: several may follow the aspect, or none)."""
        if not steps:
            return
        groups = [
            [
                Item(
                    f"{step.owner}:{step.side}:{step.index}",
                    str(k),
                    aspect_text(step.aspect),
                    PERSON_LABELS["rule"],
                    inputs[step.owner],
                    aspect_text(candidate),
                )
                for k, candidate in enumerate(step.candidates, start=1)
            ]
            for step in steps
        ]
        raw, costs = grouped_scores(self.scorer, groups, self.context)
        for step, scores, cost in zip(steps, raw, costs, strict=True):
            unit = self.scorer.judge.unit(scores)
            step.probs = {str(k): p for k, p in enumerate(unit, start=1)}
            best = max(step.probs, key=step.probs.get)
            step.answer = best if step.probs[best] >= self.config.match_threshold else NONE
            step.cost = cost

    # ------------------------------------------------------------------ the whole pipeline
    def run(self, examples: Sequence[ReferenceExample]) -> list[Judgment]:
        instances = [(ex, system) for ex in examples for system in ex.outputs]
        texts = list(
            dict.fromkeys(
                [(ex.input, ex.reference) for ex in examples] + [(ex.input, ex.outputs[s]) for ex, s in instances]
            )
        )
        extracted = dict(zip(texts, self.extract(texts), strict=True))
        ref_aspects, out_aspects = [], []
        for ex, system in instances:
            ref_aspects.append(extracted[(ex.input, ex.reference)])
            out_aspects.append(extracted[(ex.input, ex.outputs[system])])

        match_steps: list[_Step] = []
        for n, (ref, out) in enumerate(zip(ref_aspects, out_aspects, strict=True)):
            if ref[0] is None or out[0] is None or not ref[0] or not out[0]:
                continue
            for side, own, other in (("recall", ref[0], out[0]), ("precision", out[0], ref[0])):
                for i, aspect in enumerate(own):
                    step = _Step(n, side, i, match_request(aspect, other), match_choices(len(other)))
                    step.aspect, step.candidates = aspect, other
                    match_steps.append(step)
        if self.scorer is not None:
            self.match_with_scorer(match_steps, [ex.input for ex, _ in instances])
        else:
            self.answer(match_steps, f"{self.name}: matching")

        align_steps: dict[str, list[_Step]] = {"content": [], "style": []}
        for step in match_steps:
            if step.answer is None or step.answer == NONE:
                continue
            own, other = (ref_aspects, out_aspects) if step.side == "recall" else (out_aspects, ref_aspects)
            aspect, partner = own[step.owner][0][step.index], other[step.owner][0][int(step.answer) - 1]
            for kind in align_steps:
                align_steps[kind].append(
                    _Step(step.owner, step.side, step.index, alignment_request(kind, aspect, partner), [YES, NO], kind)
                )
        for kind, steps in align_steps.items():
            self.answer(steps, f"{self.name}: {kind}")

        return [
            self._judgment(n, ex, system, ref_aspects[n], out_aspects[n], match_steps, align_steps)
            for n, (ex, system) in enumerate(instances)
        ]

    def _judgment(self, n: int, ex: ReferenceExample, system: str, ref, out, match_steps, align_steps) -> Judgment:
        cost = ref[2] + out[2]
        failures = {"extraction": 0, "match": 0, "content": 0, "style": 0}
        if ref[0] is None or out[0] is None:
            failed = [side for side, found in (("reference", ref), ("output", out)) if found[0] is None]
            failures["extraction"] = len(failed)
            return Judgment(
                example_id=ex.id,
                evaluator=self.name,
                target=system,
                parsed=False,
                cost=cost,
                raw=json.dumps({"reference": ref[1], "output": out[1]}),
                explanation=f"aspects of the {' and the '.join(failed)} could not be read after "
                f"{self.config.max_retries} retries",
                details={"failures": failures, "attempts": {"reference": ref[3], "output": out[3]}},
            )
        records: dict[str, list[dict]] = {"recall": [], "precision": []}
        aspects = {"recall": (ref[0], out[0]), "precision": (out[0], ref[0])}
        for side in SIDES:
            for aspect in aspects[side][0]:
                records[side].append(
                    {
                        "aspect": aspect["title"],
                        "description": aspect["description"],
                        "evidence": aspect["evidence"],
                        "matched_aspect": None,
                        "match_probs": None,
                        "content": False,
                        "style": False,
                        "content_reason": "",
                        "style_reason": "",
                        "content_probs": None,
                        "style_probs": None,
                    }
                )
        for step in (s for s in match_steps if s.owner == n):
            record = records[step.side][step.index]
            record["match_probs"], cost = step.probs, cost + step.cost
            if step.answer is None:
                failures["match"] += 1
            elif step.answer != NONE:
                record["matched_aspect"] = aspects[step.side][1][int(step.answer) - 1]["title"]
        for kind, steps in align_steps.items():
            for step in (s for s in steps if s.owner == n):
                record = records[step.side][step.index]
                cost = cost + step.cost
                if step.answer is None:
                    failures[kind] += 1
                    record[f"{kind}_reason"] = "could not be read after the retries"
                    continue
                record[kind], record[f"{kind}_reason"], record[f"{kind}_probs"] = (
                    step.answer == YES,
                    step.reason,
                    step.probs,
                )
        scores = expert_scores(records["recall"], records["precision"])
        key = f"{self.config.aggregation}_f1"
        matched = {side: sum(r["matched_aspect"] is not None for r in records[side]) for side in SIDES}
        return Judgment(
            example_id=ex.id,
            evaluator=self.name,
            target=system,
            score=scores[key],
            cost=cost,
            explanation=(
                f"{matched['recall']} of {len(ref[0])} reference aspects and {matched['precision']} of "
                f"{len(out[0])} output aspects matched; {key} = {scores[key]:.3f}"
            ),
            details={
                "recall": records["recall"],
                "precision": records["precision"],
                "scores": scores,
                "failures": failures,
                "no_aspects": [s for s, a in (("reference", ref[0]), ("output", out[0])) if not a],
                "mode": self.config.mode,
            },
        )
