"""``persetrain demo parl``: PARL's loop end to end on the embedded model, on a CPU, on SYNTHETIC users.

Two forms run the same stages. The short form (the default) is a first taste that ends within 15 minutes on 2
cores: its judge learns two rules, whose checks leave the verifier's ln 2 loss plateau within ~80 updates where all
seven take ~500, and every later stage runs at a few users and steps. ``full`` (``persetrain demo parl --full``) is
the 55-70 minute measurement ``benchmarks/parl.py`` runs. Each form's knobs, named below, are in ``parl.yaml``
beside this module (``persetrain.demos.parl_config``). The report opens with a summary that says which form ran.

Held-out users (the PARL dataset's test split) are never trained on, by the judge or the generator:

0. **judge**: ``persetrain prepare verifier --counterfactuals`` on the training users (signature checkers as
   labels, each rule in 3 of its 5 hand-written wordings or in composed ones, every text also in edited copies
   that toggle one signature each)
   -> ``persetrain sft`` with ``recipes/verifier/cpu_smollm2_parl_news.yaml``: by default its single stage on
   every rule; ``judge_curriculum`` can train stages on rule subsets (``prepare verifier --rules``) instead,
   each a fresh LoRA on the previous stage's merged model. Once per ``judge_seeds`` (or ``judge``: one already
   trained, or several joined by commas). Several verifiers judge as one ensemble
   (``persetrain.engine.ensemble``: p(yes) averaged). ``judge_heldout_accuracy``: its accuracy on the held-out
   users' checks in the 2 wordings it never saw, next to each member's and the untrained model's on the same
   checks. It judges every later stage. ``judge_distractors`` adds distractor rules to its data
   (``prepare verifier --distractors``), measured apart (``judge_distractor_accuracy``).
1. **warm start**: rubric sets of the training users -> LoRA SFT, merged (``persetrain rubrics warmstart-data``).
   ``truth`` (the default): their true rules, the signatures all their history has, in the judge's training
   wordings (``data_prep.parl.rubrics``), with every user of ``warmstart_samples`` extra synthetic samples (other
   seeds: new users, never the held-out ones). ``induced``: the base model's structured-output sets that pass
   validation by the base model; with none passing, GRPO starts from the base.
2. **GRPO** with ``recipes/parl/cpu_smollm2_news.yaml``: per step the mean reward, the share of rollouts with
   >= 2 valid rules and the mean margin product D over the rollouts that have one; their first and last fifth.
   ``user_negatives``: other training users' texts join the reward's negatives (``prepare parl --user-negatives``).
3. **untrained** and 4. **trained**: the base and the GRPO generator on the held-out users with the ``parl``
   evaluator, ``runs`` seeds of induction each -> Max-Diff per run, mean and std, and the one-sided paired
   t-test of trained > untrained over the seed-paired runs.
5. **separation**: the *other-user pass rate* of every scored set (one valid rule or more) of both generators
   (the share of the other held-out users' texts on which all its valid rules pass, by the judge;
   ``persetrain.evaluators.parl``) next to the users' true sets by the signature checkers. Max-Diff's negatives
   are generic model outputs, so a high Max-Diff alone does not say a set is the user's own; this does.

Every stage records its numbers in ``summary.json`` as it ends, and a re-run skips the stages recorded
there (``fresh`` starts over); ``report.md`` is written from the summary at the end
(``persetrain.demos.parl_report``). A training run stopped by SIGTERM / SIGUSR1 stops the demo too
(``persetrain.train.stopped.TrainingStopped``) with nothing of its stage recorded; a re-run resumes that run from its
checkpoint and keeps any verifier stage whose merged model is there.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from persetrain import resources
from persetrain.console import console, is_quiet
from persetrain.demos.parl_config import ParlDemoConfig, format_curriculum
from persetrain.demos.parl_report import write_report
from persetrain.io import write_json

GRPO_RECIPE = resources.recipe_file("parl/cpu_smollm2_news")
JUDGE_RECIPE = resources.recipe_file("verifier/cpu_smollm2_parl_news")
SUMMARY, REPORT = "summary.json", "report.md"


def _no_bars() -> str:
    """``--disable_tqdm`` of a stage's training run: its progress bar shows unless ``persetrain -q``."""
    return str(is_quiet()).lower()


def _judge_stage(cfg: ParlDemoConfig, data: Path) -> dict:
    from data_prep.parl.distractors import RULE_PREFIX
    from data_prep.parl.rule_verifier import prepare_verifier
    from persetrain.engine import Engine, load_engine
    from persetrain.engine.ensemble import EnsembleBackend
    from persetrain.rewards.parl import RubricJudge
    from persetrain.rewards.parl_judge_eval import judge_accuracy
    from persetrain.saved import load_prepared_split
    from persetrain.train.runner import MERGED_DIR
    from persetrain.train.sft import run_sft

    prepare_verifier(
        cfg.out / "verifier_data", parl=[data], seed=cfg.seed, counterfactuals=True, distractors=cfg.judge_distractors
    )
    judge = cfg.judge
    if judge is None:
        datasets = {(): cfg.out / "verifier_data"}
        for rules, _ in cfg.judge_curriculum:
            if rules not in datasets:
                datasets[rules] = cfg.out / f"verifier_data-{'+'.join(rules)}"
                prepare_verifier(datasets[rules], parl=[data], seed=cfg.seed, counterfactuals=True, rules=rules)
        trained_dirs = []
        for seed in range(cfg.seed, cfg.seed + cfg.judge_seeds):
            member = "verifier" if seed == cfg.seed else f"verifier-seed-{seed}"
            model = cfg.model
            for k, (rules, steps) in enumerate(cfg.judge_curriculum):
                out = cfg.out / (member if k == len(cfg.judge_curriculum) - 1 else f"{member}-stage-{k}")
                if (out / MERGED_DIR).is_dir():  # finished by an earlier run of the demo (the runner writes it whole)
                    model = out / MERGED_DIR
                    continue
                model = run_sft(
                    ["--config", str(JUDGE_RECIPE), "--model_name_or_path", str(model)]
                    + ["--dataset_path", str(datasets[rules]), "--max_steps", str(steps), "--seed", str(seed + k)]
                    + ["--output_dir", str(out), "--disable_tqdm", _no_bars()]
                    + ([] if cfg.judge_train_rows is None else ["--max_train_samples", str(cfg.judge_train_rows)])
                ).trained_model()
            trained_dirs.append(model)
        judge = ",".join(str(d) for d in trained_dirs)
    validation = list(load_prepared_split(cfg.out / "verifier_data", "validation"))
    # the measure, signature rules in wordings never trained on, apart from the distractor rules
    rows = [r for r in validation if not r["rule_name"].startswith(RULE_PREFIX)]
    distractors = [r for r in validation if r["rule_name"].startswith(RULE_PREFIX)]
    engine = load_engine(judge)
    trained = judge_accuracy(RubricJudge(engine), rows)
    untrained = judge_accuracy(RubricJudge(load_engine(cfg.model)), rows)
    # each member alone, on the weights the ensemble already holds
    members = engine.backend.members if isinstance(engine.backend, EnsembleBackend) else []
    alone = [judge_accuracy(RubricJudge(Engine(m)), rows).accuracy for m in members]
    distractor = {}
    if distractors:
        measured = judge_accuracy(RubricJudge(engine), distractors)
        distractor = {
            "judge_distractor_accuracy": round(measured.accuracy, 4),
            "judge_distractor_checks": measured.n,
            "judge_distractor_per_rule": {k: round(v, 3) for k, v in measured.per_rule.items()},
        }
    return {
        "judge": judge,
        **_own_rules_accuracy(cfg, rows, trained, untrained),
        "judge_curriculum": format_curriculum(cfg.judge_curriculum) if cfg.judge is None else None,
        "judge_distractors": cfg.judge_distractors,
        "judge_heldout_accuracy_members": [round(a, 4) for a in alone],
        "judge_heldout_accuracy": round(trained.accuracy, 4),
        "judge_heldout_yes_share": round(trained.yes_share, 4),
        "judge_heldout_per_rule": {k: round(v, 3) for k, v in trained.per_rule.items()},
        "judge_heldout_accuracy_untrained": round(untrained.accuracy, 4),
        "judge_heldout_yes_share_untrained": round(untrained.yes_share, 4),
        "judge_heldout_checks": trained.n,
        **distractor,
    }


def _own_rules_accuracy(cfg: ParlDemoConfig, rows: list[dict], trained, untrained) -> dict:
    """Accuracy on the checks of the rules the judge trained on (the short form's two), trained and untrained, from
    the per-rule accuracies already measured; empty when it trained on every rule or was given (``judge``)."""
    rules = {rule for stage, _ in cfg.judge_curriculum for rule in stage}
    if cfg.judge is not None or any(not stage for stage, _ in cfg.judge_curriculum):
        return {}
    counts = {rule: sum(r["rule_name"] == rule for r in rows) for rule in sorted(rules)}
    n = sum(counts.values())

    def pooled(measured) -> float:
        return round(sum(measured.per_rule.get(rule, 0.0) * k for rule, k in counts.items()) / n, 4)

    return {
        "judge_rules": sorted(rules),
        "judge_own_rules_checks": n,
        "judge_own_rules_accuracy": pooled(trained) if n else None,
        "judge_own_rules_accuracy_untrained": pooled(untrained) if n else None,
    }


def _sample_data(out: Path, seed: int, user_negatives: int = 0) -> Path:
    """The news dataset of one synthetic sample (``prepare sample`` + ``prepare parl``), written once."""
    from data_prep.parl.prepare import prepare_parl
    from data_prep.synthetic.parl import write_parl_sample

    data = out / "data" / "parl_news"
    if not data.is_dir():
        write_parl_sample(out / "raw", seed=seed)
        prepare_parl(out / "raw", out / "data", tasks=("news",), seed=seed, user_negatives=user_negatives)
    return data


def _warmstart_stage(cfg: ParlDemoConfig, data: Path, train, config) -> dict:
    from data_prep.parl.rubrics import write_true_warmstart_data
    from persetrain.engine import load_engine
    from persetrain.train.sft import run_sft
    from persetrain.train.warmstart import write_warmstart_data

    out = cfg.out / "warmstart_data"
    try:
        if cfg.warmstart == "truth":
            seeds = range(cfg.seed + 1, cfg.seed + 1 + cfg.warmstart_samples)
            extra = [_sample_data(cfg.out / "extra" / f"seed-{s}", s) for s in seeds]
            counts = write_true_warmstart_data(
                data, "train", out, cfg.seed, cfg.warmstart_copies, cfg.warmstart_users, extra=extra
            )
        else:
            engine = load_engine(cfg.model, cache_path=cfg.out / "warmstart-engine.sqlite")
            counts = write_warmstart_data(engine, train[: cfg.warmstart_users], out, config, cfg.seed)
    except ValueError as err:  # no set passed validation: GRPO starts from the base model, as recorded
        console.print(f"warm start skipped: {err}")
        counts = {"valid": 0, "rows": 0, "valid_share": 0.0}
    policy = cfg.model
    if counts["valid"]:
        # One pass at GRPO's learning rate, no LoRA dropout (a third of the forward pass on a CPU): 2 epochs at
        # 1e-3 left a policy whose rollouts were all one text (reward std 0 in every group: no GRPO gradient).
        args = ["--model_name_or_path", cfg.model, "--dataset_path", str(cfg.out / "warmstart_data")]
        args += ["--output_dir", str(cfg.out / "warmstart"), "--use_peft", "true", "--lora_r", "16"]
        args += ["--lora_alpha", "32", "--lora_dropout", "0.0", "--learning_rate", "2e-4", "--num_train_epochs", "1"]
        args += ["--per_device_train_batch_size", "1", "--max_length", "2048", "--report_to", "none"]
        args += ["--save_strategy", "no", "--logging_steps", "1", "--activation_checkpointing", "false"]
        policy = str(run_sft([*args, "--disable_tqdm", _no_bars()]).trained_model())
    return {
        "policy": policy,
        "warmstart_source": cfg.warmstart,
        "valid_share_warmstart": round(counts["valid_share"], 3),
        "warmstart_rows": counts["rows"],
        "warmstart_samples": cfg.warmstart_samples,
    }


def _grpo_stage(cfg: ParlDemoConfig, data: Path, policy: str, judge: str) -> dict:
    from persetrain.metrics.parl import first_last_fifth
    from persetrain.train.grpo import reward_curve, run_grpo

    grpo_out = cfg.out / "grpo"
    args = ["--config", str(GRPO_RECIPE), "--model_name_or_path", policy, "--dataset_path", str(data)]
    args += ["--output_dir", str(grpo_out), "--reward_judge_model", judge, "--max_steps", str(cfg.grpo_steps)]
    args += ["--gradient_accumulation_steps", str(cfg.grpo_prompts)]
    result = run_grpo([*args, "--disable_tqdm", _no_bars()])
    model = result.trained_model()
    curve = reward_curve(grpo_out)
    first, last = first_last_fifth([r["valid_share"] for r in curve])
    d_first, d_last = first_last_fifth([r["mean_d"] if r["mean_d"] is not None else 0.0 for r in curve])
    return {
        "grpo_model": str(model),
        "grpo_steps": result.global_step,
        "grpo_prompts": cfg.grpo_prompts,
        "user_negatives": cfg.user_negatives,
        "curve": curve,
        "valid_share_first_fifth": first,
        "valid_share_last_fifth": last,
        "mean_d_first_fifth": d_first,
        "mean_d_last_fifth": d_last,
    }


def _generator_stage(cfg: ParlDemoConfig, name: str, model: str, test, data: Path, config) -> dict:
    from persetrain.engine import load_engine
    from persetrain.evaluators.base import JudgeContext
    from persetrain.evaluators.parl import PARLEvaluator
    from persetrain.metrics.parl import GT, parl_metrics, run_metrics
    from persetrain.tasks import rubric_runs

    out = cfg.out / name
    engine = load_engine(model, cache_path=out / f"{name}-engine.sqlite")
    context = JudgeContext(data=data, split="test", system=name, out=out, seed=cfg.seed)
    judgments = PARLEvaluator(config).judge(test, engine, context)
    runs = rubric_runs(test, judgments)
    metrics = parl_metrics(runs)
    # each run's scored sets (one valid rule or more: the sets Max-Diff and coverage count), for the separation stage
    sets: list[dict[str, list[str]]] = [{} for _ in range(config.runs)]
    for j in judgments:
        if j.target == GT and j.details.get("rules"):
            sets[j.details["run"]][j.example_id] = j.details["rules"]
    return {
        f"scored_sets_{name}": sets,
        f"max_diff_{name}": metrics.get("max_diff"),
        f"max_diff_{name}_std": metrics.get("max_diff_std"),
        f"max_diff_{name}_runs": [run_metrics(run)["max_diff"] for run in runs],
        f"user_coverage_{name}": metrics.get("user_coverage"),
        f"user_acc_gt_{name}": metrics.get("user_acc/gt"),
    }


def _separation_stage(summary: dict, test, tau: float) -> dict:
    """Do the generators' sets tell a held-out user from the other held-out users, or only from the generic
    negatives Max-Diff scores against? The other-user pass rate of every set Max-Diff scored, in every run, judged
    by the demo's judge, next to that of the users' true sets by the signature checkers (the floor)."""
    from data_prep.parl.rubrics import true_other_user_pass_rates
    from persetrain.engine import load_engine
    from persetrain.evaluators.parl import other_user_pass_rates
    from persetrain.metrics.parl import mean_std
    from persetrain.rewards.parl import RubricJudge

    def mean(values: list[float]) -> float | None:
        m = mean_std(values)["mean"]
        return None if m is None else round(m, 4)

    judge = RubricJudge(load_engine(summary["judge"]))
    out: dict = {}
    for name in ("untrained", "trained"):
        sets = [(user, rules) for run in summary[f"scored_sets_{name}"] for user, rules in run.items()]
        rates = other_user_pass_rates(sets, test, tau, judge)
        out[f"other_user_pass_rate_{name}"] = mean(rates)
        out[f"other_user_sets_{name}"] = len(rates)
    true = true_other_user_pass_rates(test)
    out["other_user_pass_rate_true"] = mean(true)
    out["other_user_sets_true"] = len(true)
    return out


#: The stages in the order they run, each with the line that opens it on the console.
STAGE_TITLES = {
    "judge": "train the rule verifier and measure it on held-out users",
    "warmstart": "warm-start the rubric generator",
    "grpo": "GRPO of the rubric generator, rewarded by the judge",
    "untrained": "Max-Diff of the untrained generator on held-out users",
    "trained": "Max-Diff of the trained generator on held-out users",
    "separation": "other-user pass rates of every scored set",
}
STAGES = tuple(STAGE_TITLES)


def run_parl_demo(cfg: ParlDemoConfig) -> dict:
    """Run (or finish) every stage; return the summary, also in ``out/summary.json`` and ``out/report.md``."""
    from persetrain.data import read_split
    from persetrain.evaluators.parl import PARLConfig
    from persetrain.metrics.parl import paired_runs_t_test

    if cfg.fresh:
        shutil.rmtree(cfg.out, ignore_errors=True)
    cfg.out.mkdir(parents=True, exist_ok=True)
    path = cfg.out / SUMMARY
    summary: dict = json.loads(path.read_text()) if path.is_file() else {}
    data = _sample_data(cfg.out, cfg.seed, cfg.user_negatives)
    _, train = read_split(data, "train")
    _, test = read_split(data, "test")
    test = test[: cfg.heldout_users]
    summary["heldout_users"] = len(test)
    summary["form"] = cfg.form

    def stage(name: str, run: Callable[[], dict]) -> None:
        if f"{name}_s" in summary:
            return  # recorded by an earlier run
        console.rule(f"{STAGES.index(name) + 1}/{len(STAGES)} {name}: {STAGE_TITLES[name]} ({cfg.form} form)")
        start = time.perf_counter()
        summary.update(run())
        summary[f"{name}_s"] = round(time.perf_counter() - start, 1)
        write_json(path, summary)

    stage("judge", lambda: _judge_stage(cfg, data))
    config = PARLConfig(temperature=0.6, max_new_tokens=cfg.max_new_tokens, runs=cfg.runs, judge_model=summary["judge"])
    # An induced warm start is validated by the base model, which keeps every parsed set: validated by the trained
    # judge, 2 of 12 sets passed and every GRPO rollout after that warm start was unparsable. Kept by the base
    # model, 9 of 12 sets were the same two rules, which the trained judge rejects: no GRPO rollout was valid.
    stage("warmstart", lambda: _warmstart_stage(cfg, data, train, replace(config, runs=1, judge_model=None)))
    stage("grpo", lambda: _grpo_stage(cfg, data, summary["policy"], summary["judge"]))
    stage("untrained", lambda: _generator_stage(cfg, "untrained", cfg.model, test, data, config))
    stage("trained", lambda: _generator_stage(cfg, "trained", summary["grpo_model"], test, data, config))
    stage("separation", lambda: _separation_stage(summary, test, config.tau))
    test_result = paired_runs_t_test(summary["max_diff_trained_runs"], summary["max_diff_untrained_runs"])
    summary["max_diff_p_value"] = test_result["p"]
    summary["total_s"] = round(sum(v for k, v in summary.items() if k.endswith("_s") and k != "total_s"), 1)
    write_json(path, summary)
    write_report(cfg.out / REPORT, summary)
    console.print(f"[green]PARL demo[/green]: report -> {cfg.out / REPORT}")
    return summary
