"""Evaluator targets on this machine: every figure comes from one run of this script.

Sections register in ``SECTIONS`` (name -> function(args) -> dict of figures); each method's helper
adds its own. The last line printed is one JSON object with every section's figures.

ExPerT / AuPEL, on the SYNTHETIC PARL sample (Amazon reviews with planted writing
signatures; the user's own text is system ``gold``, the sample's ``synthetic-non`` / ``synthetic-rag``
negatives stand in for the Non and RAG generators) and the embedded model:

* ``elo_bootstrap_seconds``: 1,000 bootstrapped orders of 10,000 games (5 players), best of 3
  (``elo_bootstrap_cpu_seconds``: the process's CPU time for the same, best of 3);
* ``expert_calls_per_instance`` and seconds per instance of the ``choice_probs`` path and of the
  sampled-text path on the same examples (``expert_choice_probs_speedup`` = text / choice_probs),
  both through ``persetrain evaluate`` in fresh run directories (no shared engine cache); the
  choice_probs run is left at ``runs/bench-evaluators/expert/``;
* ``expert_decision_agreement``: share of closed-set steps (matches, and content / style decisions
  of pairs both paths matched alike) with the same decision under greedy decoding;
* ``expert_self_f``: ExPerT's F of ``gold`` (the reference against itself) and whether it is the
  highest of the generators (``expert_self_f_is_max``);
* ``aupel_gold_rank``: the rank of ``gold`` in AuPEL's personalization Elo (1 + the number of
  generators rated strictly higher; ``aupel_gold_above_all`` says whether it is strictly first);
* ``expert_negatives_f``: ExPerT's mean F of the other generators (the negatives), next to ``expert_self_f``.

With ``--scorer rm:DIR`` (or ``verifier:MODEL``), the ``trained`` section runs AuPEL's comparisons and
ExPerT's match step with that trained judge, on the held-out users only (the PARL test users,
``data_prep.parl.prepare.split_of``: a judge trained with ``prepare preference --reference`` on the same sample
never saw them): ``trained_aupel_gold_rank``, ``trained_expert_self_f``, ``trained_expert_negatives_f``, and
``trained_aupel_quality_gold_rank`` (the same Elo rank in the quality dimension, which shows no profile).

    python benchmarks/evaluators.py [--out runs/bench-evaluators] [--expert-examples 1] [--aupel-examples 4]
        [--scorer rm:DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import best_of, emit  # beside this script

MODEL = "embedded:smollm2-135m-instruct"


def sample_reference_data(out: Path) -> Path:
    """The reference dataset built from the synthetic PARL sample (written once under ``out``)."""
    from data_prep.parl.reference import build_reference
    from data_prep.synthetic.parl import write_parl_sample

    data = out / "data" / "reference-amazon"
    if not (data / "dataset.json").is_file():
        raw = out / "data" / "raw"
        write_parl_sample(raw, seed=0)
        build_reference(raw / "amazon", "amazon", [raw / "amazon" / "baselines.jsonl"], data, synthetic=True)
    return data


def heldout_reference_data(out: Path) -> Path:
    """The sample's reference records of the held-out (PARL test) users, written once under ``out``."""
    from data_prep.parl.prepare import split_of

    source = sample_reference_data(out)
    data = out / "data" / "reference-amazon-heldout"
    if not (data / "dataset.json").is_file():
        records = [line for line in (source / "test.jsonl").read_text().splitlines() if line.strip()]
        held = [r for r in records if split_of(json.loads(r)["user_id"]) == "test"]
        card = json.loads((source / "dataset.json").read_text())
        data.mkdir(parents=True, exist_ok=True)
        (data / "test.jsonl").write_text("".join(f"{r}\n" for r in held))
        (data / "dataset.json").write_text(json.dumps({**card, "n": len(held), "users": "held out (PARL test)"}))
    return data


def elo_section(args) -> dict:
    from persetrain.metrics.elo import bootstrap_elo

    rng = np.random.default_rng(0)
    players, n_games = 5, 10_000
    a = rng.integers(0, players, n_games)
    b = (a + rng.integers(1, players, n_games)) % players
    s = rng.choice([0.0, 0.5, 1.0], n_games)
    times, cpu = [], []
    for _ in range(3):
        start, start_cpu = time.perf_counter(), time.process_time()
        bootstrap_elo(a, b, s, players, n_boot=1000)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    # CPU seconds too: on a machine shared with other jobs, wall time mostly measures the queue.
    return {"elo_bootstrap_seconds": min(times), "elo_bootstrap_cpu_seconds": min(cpu)}


def _evaluate(data: Path, out: Path, evaluator: str, n: int, options: dict) -> tuple[dict, list[dict], float]:
    from persetrain.evaluation import EvaluationConfig, evaluate
    from persetrain.evaluators.registry import SystemSpec

    shutil.rmtree(out, ignore_errors=True)
    config = EvaluationConfig(
        data=str(data), out=str(out), max_examples=n, systems=[SystemSpec(evaluator, evaluator, MODEL, dict(options))]
    )
    start = time.perf_counter()
    metrics = evaluate(config)
    seconds = time.perf_counter() - start
    judgments = [json.loads(line) for line in (out / "judgments" / f"{evaluator}.jsonl").read_text().splitlines()]
    return metrics, judgments, seconds


def _decisions(judgment: dict) -> dict[tuple, object]:
    """Every closed-set decision of one instance, keyed by the question asked."""
    found = {}
    for side in ("recall", "precision"):
        for i, record in enumerate(judgment["details"][side]):
            found[(side, i, "match")] = record["matched_aspect"]
            if record["matched_aspect"] is not None:
                for kind in ("content", "style"):
                    found[(side, i, kind, record["matched_aspect"])] = record[kind]
    return found


#: ExPerT's options for the sample's short reviews (1-4 sentences): a few one-sentence aspects cover them.
EXPERT_OPTIONS = {
    "max_aspects": 2,
    "max_evidence": 1,
    "extract_tokens": 160,
    "answer_tokens": 40,
    "reason_chars": 100,
    "max_retries": 1,
}


def expert_section(args) -> dict:
    data = sample_reference_data(args.out)
    runs = {}
    for mode, folder in (("choice_probs", "expert"), ("text", "expert-text")):
        metrics, judgments, seconds = _evaluate(
            data, args.out / folder, "expert", args.expert_examples, {**EXPERT_OPTIONS, "mode": mode}
        )
        # Judging seconds only (the runner's ``cost.seconds``): model loading is the same for both paths.
        runs[mode] = {
            "metrics": metrics["systems"]["expert"],
            "judgments": judgments,
            "seconds_per_instance": metrics["systems"]["expert"]["cost"]["seconds"] / len(judgments),
        }
    agree = compared = 0
    for fast, slow in zip(runs["choice_probs"]["judgments"], runs["text"]["judgments"], strict=True):
        if not (fast["parsed"] and slow["parsed"]):
            continue
        a, b = _decisions(fast), _decisions(slow)
        for key in a.keys() & b.keys():
            compared += 1
            agree += a[key] == b[key]
    targets = runs["choice_probs"]["metrics"]["targets"]
    f = {t: m["content_style_average_f1"] for t, m in targets.items() if "content_style_average_f1" in m}
    calls = [j["cost"]["calls"] for j in runs["choice_probs"]["judgments"]]
    text_calls = [j["cost"]["calls"] for j in runs["text"]["judgments"]]
    return {
        "expert_calls_per_instance": float(np.mean(calls)),
        "expert_calls_per_instance_text": float(np.mean(text_calls)),
        "expert_seconds_per_instance": runs["choice_probs"]["seconds_per_instance"],
        "expert_seconds_per_instance_text": runs["text"]["seconds_per_instance"],
        "expert_choice_probs_speedup": (
            runs["text"]["seconds_per_instance"] / runs["choice_probs"]["seconds_per_instance"]
        ),
        "expert_decision_agreement": agree / compared if compared else None,
        "expert_decisions_compared": compared,
        "expert_f_by_generator": f,
        "expert_self_f": f.get("gold"),
        "expert_negatives_f": _negatives_f(f),
        "expert_self_f_is_max": bool(f) and f.get("gold") == max(f.values()),
        "expert_unparsed": runs["choice_probs"]["metrics"]["n_unparsed"],
        "expert_instances": len(calls),
    }


def _negatives_f(f: dict[str, float]) -> float | None:
    """The mean F of every generator other than ``gold`` (the user's own text)."""
    others = [v for k, v in f.items() if k != "gold"]
    return float(np.mean(others)) if others else None


def _gold_rank(personalization: dict) -> int:
    """1 + the number of generators rated strictly higher than ``gold`` in personalization Elo."""
    gold = personalization["gold"]["median"]
    return 1 + sum(v["median"] > gold for v in personalization.values())


def trained_section(args) -> dict:
    """AuPEL and ExPerT with a trained judge as their scorer (``--scorer``), on the held-out users."""
    if not args.scorer:
        return {}
    data = heldout_reference_data(args.out)
    n = args.trained_examples
    metrics, _, aupel_seconds = _evaluate(
        data, args.out / "trained-aupel", "aupel", n, {"repeats": 40, "vote": "sample", "scorer": args.scorer}
    )
    elo = metrics["systems"]["aupel"]["elo"]
    personalization = elo["personalization"]
    options = {**EXPERT_OPTIONS, "scorer": args.scorer}
    metrics, judgments, expert_seconds = _evaluate(data, args.out / "trained-expert", "expert", n, options)
    targets = metrics["systems"]["expert"]["targets"]
    f = {t: m["content_style_average_f1"] for t, m in targets.items() if "content_style_average_f1" in m}
    return {
        "trained_scorer": args.scorer,
        "trained_users": len({j["example_id"] for j in judgments}),
        "trained_aupel_gold_rank": _gold_rank(personalization),
        "trained_aupel_personalization_elo": {s: round(v["median"], 1) for s, v in personalization.items()},
        # Quality is judged without the profile: gold first there too means the judge need not read the person.
        "trained_aupel_quality_gold_rank": _gold_rank(elo["quality"]),
        "trained_expert_f_by_generator": f,
        "trained_expert_self_f": f.get("gold"),
        "trained_expert_negatives_f": _negatives_f(f),
        "trained_aupel_seconds": aupel_seconds,
        "trained_expert_seconds": expert_seconds,
    }


def aupel_section(args) -> dict:
    data = sample_reference_data(args.out)
    # The paper's protocol: 40 repeats, half swapped; each repeat's vote drawn from choice_probs.
    metrics, judgments, seconds = _evaluate(
        data, args.out / "aupel", "aupel", args.aupel_examples, {"repeats": 40, "vote": "sample"}
    )
    m = metrics["systems"]["aupel"]
    personalization = m["elo"]["personalization"]
    ranking = sorted(personalization, key=lambda s: -personalization[s]["median"])
    gold = personalization["gold"]["median"]
    return {
        "aupel_gold_rank": _gold_rank(personalization),
        "aupel_gold_above_all": all(gold > v["median"] for s, v in personalization.items() if s != "gold"),
        "aupel_personalization_elo": {s: round(personalization[s]["median"], 1) for s in ranking},
        "aupel_overall_elo": {s: round(v["median"], 1) for s, v in m["elo"]["overall"].items()},
        "aupel_seconds": seconds,
        "aupel_examples": args.aupel_examples,
    }


PREFEVAL_DEV = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"


def pref_section(args) -> dict:
    """PREF on the PrefEval dev slice (``--pref-examples`` questions spread over a seeded sample of 24): its ablations,
    the zero-shot letter baseline and GEMBA side by side through ``persetrain meta-eval`` (flip and
    manipulation probes included), then stage 3's speed from ``choice_probs`` against sampled text.

    The meta-evaluation keeps its engine cache under ``--out``, so a re-run only computes what is
    missing (its seconds then count cache hits; the speed-up below starts every timed run with empty caches).
    """
    from persetrain.engine import load_engine
    from persetrain.evaluation import load_examples
    from persetrain.evaluators.pref import PREF, PREFConfig
    from persetrain.evaluators.pref_stages import score_by_probs, score_by_text, stage3_inputs
    from persetrain.evaluators.registry import SystemSpec
    from persetrain.meta_eval import MetaEvalConfig, meta_evaluate

    systems = [
        SystemSpec("pref", "pref", MODEL),
        SystemSpec("pref_base", "pref", MODEL, {"variant": "base"}),
        SystemSpec("pref_s1", "pref", MODEL, {"variant": "w/S1"}),
        SystemSpec("mcq_letter", "mcq-letter", MODEL),
        SystemSpec("gemba", "gemba", MODEL),
    ]
    out = args.out / "pref-meta"
    # A seeded sample of 24 questions (8 per topic on average) and, on a slow machine, every k-th of them,
    # so that a smaller run is a spread subset of the larger one and reuses its engine cache.
    config = MetaEvalConfig(data=str(PREFEVAL_DEV), out=str(out), systems=systems, max_examples=24, seed=0)
    _, sample = load_examples(config)
    examples = sample[:: max(1, len(sample) // args.pref_examples)][: args.pref_examples]
    result = meta_evaluate(config, examples)["systems"]
    figures = {
        "pref_accuracy": result["pref"]["agreement"]["accuracy"],
        "pref_mse": result["pref"]["agreement"]["mse"],
        "pref_ndcg": result["pref"]["agreement"]["ndcg"],
        "pref_base_accuracy": result["pref_base"]["agreement"]["accuracy"],
        "pref_s1_accuracy": result["pref_s1"]["agreement"]["accuracy"],
        "zero_shot_accuracy": result["mcq_letter"]["agreement"]["accuracy"],
        "gemba_accuracy": result["gemba"]["agreement"]["accuracy"],
        "pref_base_mse": result["pref_base"]["agreement"]["mse"],
        "pref_s1_mse": result["pref_s1"]["agreement"]["mse"],
        "pref_questions": len(examples),
        "pref_question_ids": [ex.id for ex in examples],
    }
    for name in ("pref", "mcq_letter", "gemba"):
        figures[f"flip_rate_{name}"] = result[name]["flip_rate"]
        figures[f"manipulation_delta_{name}"] = result[name]["manipulation"]["relative_score_change"]
        figures[f"manipulation_accuracy_change_{name}"] = result[name]["manipulation"]["accuracy_change"]
    figures["pref_beats_base_and_zero_shot"] = (
        figures["pref_accuracy"] > figures["pref_base_accuracy"]
        and figures["pref_accuracy"] > figures["zero_shot_accuracy"]
    )

    # Stage 3 alone, on the same rubrics, with no request cache: expected scores vs the sampled JSON list.
    examples = examples[: args.speed_examples]
    cached = load_engine(MODEL, cache_path=out / "engine-cache.sqlite")
    rubrics = PREF(PREFConfig()).rubrics(examples, cached)
    cached.close()
    shown, requests = stage3_inputs(examples, rubrics)
    # The prefix cache starts empty for every timed run: otherwise whichever path runs second finds the
    # other's prompt heads computed.
    engine = load_engine(MODEL)
    times = {"choice_probs": [], "text": []}
    for _ in range(3):
        for mode, run in (
            ("choice_probs", lambda: score_by_probs(engine, shown, requests)),
            ("text", lambda: score_by_text(engine, shown, requests, PREFConfig())),
        ):
            engine.backend.prefix_cache.clear()
            seconds, _ = best_of(run, 1)  # one call a round: the rounds interleave the two paths
            times[mode].append(seconds / len(examples))
    figures["pref_stage3_seconds_per_question"] = min(times["choice_probs"])
    figures["pref_stage3_seconds_per_question_text"] = min(times["text"])
    figures["pref_choice_probs_speedup"] = min(times["text"]) / min(times["choice_probs"])
    return figures


#: Section name -> function(args) -> figures. Other evaluators' helpers add their sections here.
SECTIONS: dict[str, Callable] = {
    "elo": elo_section,
    "expert": expert_section,
    "aupel": aupel_section,
    "pref": pref_section,
    "trained": trained_section,
}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-evaluators"))
    parser.add_argument("--expert-examples", type=int, default=1)
    parser.add_argument("--aupel-examples", type=int, default=4)
    parser.add_argument(
        "--pref-examples", type=int, default=24, help="PrefEval dev questions (of 144) for PREF, at most 24"
    )
    parser.add_argument("--speed-examples", type=int, default=4, help="questions timed for the stage-3 speed-up")
    parser.add_argument("--scorer", help="rm:DIR or verifier:MODEL: the trained section's judge (skipped without)")
    parser.add_argument("--trained-examples", type=int, default=8, help="held-out users the trained section judges")
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="run only these sections")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    figures: dict = {}
    for name, section in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        found = section(args)
        print(f"{name}: {json.dumps(found)}", flush=True)
        figures.update(found)
    emit(figures)


if __name__ == "__main__":
    main()
