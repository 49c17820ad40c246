"""``make demo``: the PerSE pipeline end to end on the embedded model, on a CPU, in minutes.

1. write synthetic raw data with planted reviewer preferences (``data_prep.synthetic.perse``);
2. anonymize and summarize the plots with the embedded model, probe for contamination, and build
   Per-MPST K=3 with a reviewer-disjoint split (``data_prep.perse.prepare``);
3. fine-tune the embedded model into a PerSE judge with the CPU recipe (``persetrain.train.sft``; a LoRA
   adapter, merged into ``judge/merged``);
4. evaluate the trained judge, the untrained model and the baselines on the held-out reviewers and
   write the report (``persetrain.evaluation``).

Every step resumes: the data preparation and the judges go through the engine's request cache,
and training restarts from its newest checkpoint, so a re-run after an interruption is cheap.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from persetrain import resources
from persetrain.console import console
from persetrain.io import atomic_write
from persetrain.models import DEFAULT_MODEL

CPU_RECIPE = resources.recipe_file("perse/cpu_smollm2_per-mpst-k3")

#: Sizes that keep the whole demo within ~15 minutes on 2 CPU cores. The LLM steps cost per plot,
#: so plots are few; reviewers are many, so that the 9:1 split holds out ~24 of them.
DEMO_DATA = {"n_plots": 60, "n_reviewers": 240, "reviews_per_reviewer": (7, 9), "n_sparse_reviewers": 4}
#: Two queries per held-out reviewer: a pooled correlation over many reviewers, at a judging cost
#: the CPU can pay twice (trained and untrained).
DEMO_QUERIES_PER_REVIEWER = 2
#: Profile plots are cut to their opening words: the profile's reviews say what kind of story each
#: one is, and every token saved in the prompt is one more the CPU recipe can train on.
DEMO_PROFILE_WORDS = 16
#: The synthetic plots name a handful of characters and are ~100 words long.
DEMO_LLM_TOKENS = {"anonymize": 80, "summarize": 96}
#: The paper samples up to 600 new tokens at temperature 0.8 from 7B-13B judges. The synthetic
#: reviews are three or four sentences (~40 tokens), so the demo caps them at 64 tokens, and it
#: decodes greedily: a 135M judge's samples at 0.8 wander (on one trained judge, Kendall of the parsed
#: score 0.04 sampled vs 0.32 greedy, with the expected score unchanged at 0.35). `persetrain
#: evaluate` defaults to 0.8.
DEMO_REVIEW_TOKENS = 64
DEMO_TEMPERATURE = 0.0


def _kendall(systems: dict, name: str) -> float | None:
    """A judge's Kendall tau, the better of its parsed and its expected score (as benchmarks/perse.py credits it);
    None when neither is defined (missing, or NaN: constant scores rank nothing, so any defined tau beats them)."""
    taus = [systems.get(n, {}).get("kendall") for n in (name, f"{name}-expected")]
    found = [tau for tau in taus if tau is not None and not math.isnan(tau)]
    return max(found) if found else None


def summary_section(metrics: dict, timings: dict[str, float]) -> list[str]:
    """What a newcomer reads first in the demo's report: what was trained, what was measured, what it means."""
    systems = metrics["systems"]
    trained, untrained = _kendall(systems, "trained"), _kendall(systems, "untrained")
    average, mf = _kendall(systems, "reviewer-avg"), _kendall(systems, "mf")

    def number(value: float | None) -> str:
        return "undefined" if value is None else f"{value:.3f}"

    learned = trained is not None and all(
        trained > (other if other is not None else -1) for other in (untrained, average)
    )
    meaning = (
        "The trained judge ranks held-out reviewers' scores better than the untrained model and than the reviewer's "
        "own average: it learned to read a reviewer's taste from their past reviews."
        if learned
        else "The trained judge does not beat both the untrained model and the reviewer's own average in this run."
    )
    return [
        "## Summary",
        "",
        f"Made from SYNTHETIC reviewers with planted tastes, in {sum(timings.values()) / 60:.1f} minutes.",
        "",
        "- **Trained**: a PerSE judge, the embedded SmolLM2-135M-Instruct with a LoRA adapter, which reads three "
        "past reviews of a reviewer (Per-MPST K=3) and writes that reviewer's review and score of a new plot.",
        f"- **Measured**: on {metrics['n_examples']} queries of reviewers it never saw, Kendall's tau between its "
        f"scores and the reviewers' own: trained {number(trained)}, untrained {number(untrained)}, the reviewer's "
        f"average score {number(average)}, matrix factorization {number(mf)} (each judge credited with the better "
        "of its parsed and its expected score).",
        f"- **Meaning**: {meaning}",
        "",
    ]


def run_demo(out: Path, model: str = DEFAULT_MODEL) -> dict:
    from data_prep.perse.prepare import LLMTokens, prepare_perse
    from data_prep.synthetic.perse import write_sample_data
    from persetrain.engine import load_engine
    from persetrain.evaluation import EvaluationConfig, evaluate
    from persetrain.evaluators.registry import SystemSpec
    from persetrain.train.sft import run_sft

    out = Path(out)
    timings: dict[str, float] = {}

    start = time.perf_counter()
    console.rule("1/4 synthetic raw data")
    write_sample_data(out / "raw", seed=0, **DEMO_DATA)
    timings["data"] = time.perf_counter() - start

    start = time.perf_counter()
    console.rule("2/4 anonymize, summarize, build Per-MPST K=3")
    engine = load_engine(model, cache_path=out / "engine-cache.sqlite")
    # The title probe is left to `persetrain prepare perse`: invented titles cannot be memorized.
    prepared = prepare_perse(
        out / "raw",
        out / "data",
        engine=engine,
        ks=(3,),
        probe=False,
        profile_words=DEMO_PROFILE_WORDS,
        llm_tokens=LLMTokens(**DEMO_LLM_TOKENS),
        batch_size=64,
    )
    engine.close()
    dataset = prepared.datasets["per_mpst_k3"]
    timings["prepare"] = time.perf_counter() - start

    start = time.perf_counter()
    console.rule("3/4 fine-tune the judge (CPU recipe)")
    judge = run_sft(
        [
            "--config",
            str(CPU_RECIPE),
            "--model_name_or_path",
            model,
            "--dataset_path",
            str(dataset),
            "--output_dir",
            str(out / "judge"),
        ]
    ).trained_model()
    timings["sft"] = time.perf_counter() - start

    start = time.perf_counter()
    console.rule("4/4 evaluate on held-out reviewers")
    judging = {"max_new_tokens": DEMO_REVIEW_TOKENS, "temperature": DEMO_TEMPERATURE}
    metrics = evaluate(
        EvaluationConfig(
            data=str(dataset),
            out=str(out / "eval"),
            systems=[
                SystemSpec("trained", "perse", str(judge), dict(judging)),
                SystemSpec("untrained", "perse", model, dict(judging)),
                SystemSpec.parse("reviewer-avg"),
                SystemSpec.parse("mf"),
            ],
            max_per_reviewer=DEMO_QUERIES_PER_REVIEWER,
        ),
        overwrite=True,  # the demo owns its eval folder: a rerun with another --model replaces the earlier one
    )
    timings["evaluate"] = time.perf_counter() - start
    report = out / "eval" / "report.md"
    title, _, rest = report.read_text().partition("\n")
    with atomic_write(report) as f:
        f.write("\n".join([title, "", *summary_section(metrics, timings), rest.lstrip("\n")]))

    console.print(
        f"report: {out / 'eval' / 'report.md'}; timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())
    )
    return {"metrics": metrics, "timings": timings}
