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

Failures follow the paper's code: an extraction is retried with the temperature raised by
``retry_temperature_step`` (up to ``max_retries`` retries) and, if it still fails, the instance is
kept as ``Judgment(parsed=False)``; a match or alignment step that still fails after its retries
counts as unmatched / not aligned and is counted in ``details["failures"]``. A side with no aspects
scores 0 (the package's behaviour), recorded in ``details["no_aspects"]``.

The cost of an instance is everything it takes to score that output from scratch, the reference's
extraction included (as the paper's 18.6 calls per instance counts it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from persetrain.engine import ChatRequest, Cost, Engine, GenerationParams
from persetrain.evaluators.base import Evaluator, EvaluatorConfig, JudgeContext, register
from persetrain.io import InputError
from persetrain.metrics.expert import AGGREGATIONS, DEFAULT, expert_scores
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


def _cut(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words])


def parse_aspects(text: str) -> list[dict]:
    """The extraction answer as a list of aspects; ValueError when it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from None
    if not isinstance(data, list):
        raise ValueError("not a JSON list")
    aspects = []
    for item in data:
        if not isinstance(item, dict):
            raise ValueError("an aspect is not an object")
        title, description, evidence = item.get("title"), item.get("description", ""), item.get("evidence")
        if not isinstance(title, str) or not title.strip() or not isinstance(evidence, list):
            raise ValueError("an aspect lacks a title or an evidence list")
        evidence = [e.strip() for e in evidence if isinstance(e, str) and e.strip()]
        if not evidence:
            raise ValueError(f"aspect {title!r} has no evidence")
        aspects.append({"title": title.strip(), "description": str(description).strip(), "evidence": evidence})
    return aspects


def _parse_json_field(text: str, field: str, allowed: Sequence[str]) -> tuple[str, str]:
    """(answer, reason) of a match or alignment object written by the model."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from None
    if not isinstance(data, dict) or field not in data:
        raise ValueError(f"no {field!r} in the answer")
    value = data[field]
    if value not in allowed:
        raise ValueError(f"{field} {value!r} is not one of {list(allowed)}")
    return value, str(data.get("reason", ""))


class _Step:
    """One closed-set question of one instance: where its answer goes and what it cost."""

    def __init__(
        self, owner: int, side: str, index: int, request: ChatRequest, choices: list[str], kind: str = "match"
    ):
        self.owner, self.side, self.index, self.request = owner, side, index, request
        self.choices, self.kind = choices, kind
        self.answer: str | None = None
        self.reason = ""
        self.probs: dict[str, float] | None = None
        self.cost = Cost()


class ExPerTJudge:
    """The pipeline over a batch of instances; ``run`` returns one Judgment per (example, system)."""

    def __init__(self, engine: Engine, config: ExPerTConfig, name: str):
        self.engine, self.config, self.name = engine, config, name

    # ------------------------------------------------------------------ retried generation
    def _generate_retried(
        self,
        requests: list[ChatRequest],
        params: list[GenerationParams],
        parse: Callable[[str], object] | list[Callable[[str], object]],
        description: str,
    ) -> list[tuple[object | None, str, Cost, int]]:
        """(parsed value or None, last text, summed cost, attempts) per request, retrying failures.

        ``parse`` (one for all requests, or one per request) raises ValueError on an unreadable answer.
        """
        parsers = parse if isinstance(parse, list) else [parse] * len(requests)
        results: list = [[None, "", Cost(), 0] for _ in requests]
        todo = list(range(len(requests)))
        for attempt in range(self.config.max_retries + 1):
            if not todo:
                break
            temperature = attempt * self.config.retry_temperature_step
            batch_params = [
                p.model_copy(update={"temperature": temperature, "seed": self.config.seed + attempt})
                for p in (params[i] for i in todo)
            ]
            label = description if attempt == 0 else f"{description} (retry {attempt})"
            outputs = self.engine.generate([requests[i] for i in todo], batch_params, description=label)
            failed = []
            for i, gen in zip(todo, outputs, strict=True):
                results[i][1], results[i][2], results[i][3] = gen.text, results[i][2] + gen.cost, attempt + 1
                try:
                    results[i][0] = parsers[i](gen.text)
                except (ValueError, KeyError, TypeError):
                    failed.append(i)
            todo = failed
        return [tuple(r) for r in results]

    # ------------------------------------------------------------------ steps
    def extract(self, items: list[tuple[str, str]]) -> list[tuple[list[dict] | None, str, Cost, int]]:
        """Aspects of each distinct (task input, text)."""
        c = self.config
        schema = aspects_schema(c.max_aspects, c.max_evidence)
        requests = [extract_request(inp, _cut(text, c.max_text_words), c.max_aspects) for inp, text in items]
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
            parsers = [partial(_parse_json_field, field=field, allowed=s.choices) for s in steps]
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
                lambda text: text if text.endswith(ALIGN_KEY) else _bad(text),
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
            for i, aspect in enumerate(ref[0]):
                match_steps.append(_Step(n, "recall", i, match_request(aspect, out[0]), match_choices(len(out[0]))))
            for j, aspect in enumerate(out[0]):
                match_steps.append(_Step(n, "precision", j, match_request(aspect, ref[0]), match_choices(len(ref[0]))))
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


def _bad(text: str):
    raise ValueError(f"unfinished answer {text[-40:]!r}")


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
class ExPerT(Evaluator):
    tasks = ("reference",)
    Config = ExPerTConfig

    def judge(
        self, examples: Sequence[ReferenceExample], engine: Engine | None, context: JudgeContext
    ) -> list[Judgment]:
        check_reference_examples(examples, context.data, need_reference=True)
        if self.config.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {self.config.aggregation!r}; use one of {list(AGGREGATIONS)}")
        return ExPerTJudge(engine, self.config, context.system).run(examples)

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
