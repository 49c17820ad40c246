"""``persetrain demo parl`` end to end at toy sizes on the tiny model: every stage, the report, and a re-run
that finishes from summary.json instead of starting over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from datasets import load_from_disk

from data_prep.parl.rubrics import true_rules
from persetrain.data import read_split
from persetrain.demos.parl import REPORT, SUMMARY, run_parl_demo
from persetrain.demos.parl_config import (
    FORM_KNOBS,
    JUDGE_CURRICULUM,
    ParlDemoConfig,
    demo_config,
    form_knobs,
    format_curriculum,
    parse_curriculum,
)
from persetrain.demos.parl_report import summary_section
from persetrain.io import InputError


@pytest.mark.slow
def test_demo_parl_runs_every_stage_and_resumes_from_its_summary(tiny_llama_dir, tmp_path):
    """The short form (the command's default) at toy sizes."""
    config = demo_config(
        full=False,
        out=tmp_path / "demo",
        model=str(tiny_llama_dir),
        judge_curriculum=parse_curriculum("colon:1,all:1"),
        judge_seeds=2,
        judge_distractors=True,
        judge_train_rows=64,
        warmstart_users=2,
        warmstart_samples=1,
        warmstart_copies=1,
        grpo_steps=1,
        grpo_prompts=2,
        user_negatives=2,
        heldout_users=2,
        runs=2,
        max_new_tokens=16,
    )
    summary = run_parl_demo(config)
    test = read_split(config.out / "data" / "parl_news", "test")[1][:2]
    # two verifiers (seeds 0 and 1) judge as one ensemble, each member also measured alone
    first, second = summary["judge"].split(",")
    assert first.endswith("verifier/merged") and second.endswith("verifier-seed-1/merged")
    # each a curriculum: the colon checks alone (seed s), then every rule's from that merged model (seed s + 1)
    for member, seed in (("verifier", 0), ("verifier-seed-1", 1)):
        dirs = (config.out / f"{member}-stage-0", config.out / member)
        stages = [json.loads((d / "resolved_config.json").read_text()) for d in dirs]
        assert [c["script"]["dataset_path"] for c in stages] == [
            str(config.out / "verifier_data-colon"),
            str(config.out / "verifier_data"),
        ]
        assert stages[1]["model"]["model_name_or_path"] == str(dirs[0] / "merged")
        assert [c["training"]["seed"] for c in stages] == [seed, seed + 1]
        assert [c["training"]["max_steps"] for c in stages] == [1, 1]
        assert [c["script"]["max_train_samples"] for c in stages] == [64, 64]
    assert len(summary["judge_heldout_accuracy_members"]) == 2 and summary["judge_heldout_checks"] > 0
    assert 0 <= summary["judge_heldout_accuracy"] <= 1 and set(summary["judge_heldout_per_rule"])
    # distractor checks are measured apart from the signature checks, which stay the measure
    assert not any(name.startswith("distractor:") for name in summary["judge_heldout_per_rule"])
    assert 0 <= summary["judge_distractor_accuracy"] <= 1 and summary["judge_distractor_checks"] > 0
    assert all(name.startswith("distractor:") for name in summary["judge_distractor_per_rule"])
    # 2 training users and every user of the seed-1 sample with 2 or more true rules, 1 copy each
    extra = [
        ex
        for split in ("train", "test")
        for ex in read_split(config.out / "extra" / "seed-1" / "data" / "parl_news", split)[1]
    ]
    assert summary["warmstart_source"] == "truth" and summary["warmstart_samples"] == 1
    assert summary["warmstart_rows"] == 2 + sum(len(true_rules(ex)) >= 2 for ex in extra) > 2
    assert summary["policy"].endswith("warmstart/merged")
    assert summary["grpo_steps"] == 1 and [r["step"] for r in summary["curve"]] == [1]
    # two users in the step: 2 x num_generations rollouts, all of step 1
    parts = [json.loads(line) for line in (config.out / "grpo" / "reward_parts.jsonl").read_text().splitlines()]
    assert len(parts) == 2 * 4 and {p["step"] for p in parts} == {1}
    # the reward's negatives: the generators' outputs and 2 other users' texts per training user
    data = load_from_disk(str(config.out / "data" / "parl_news"))
    assert summary["user_negatives"] == 2 and {len(ids) for ids in data["train"]["user_negative_ids"]} == {2}
    grpo_config = json.loads((config.out / "grpo" / "resolved_config.json").read_text())
    assert grpo_config["training"]["gradient_accumulation_steps"] == 2
    assert len(summary["max_diff_trained_runs"]) == len(summary["max_diff_untrained_runs"]) == 2
    for stage in ("judge", "warmstart", "grpo", "untrained", "trained", "separation"):
        assert summary[f"{stage}_s"] >= 0
    # the separation stage judges every set Max-Diff scored, in every run, against the other held-out users' texts
    for name in ("trained", "untrained"):
        sets = summary[f"scored_sets_{name}"]
        assert len(sets) == 2 and all(rules for run in sets for rules in run.values())
        coverage = sum(len(run) for run in sets) / (2 * len(test))
        assert coverage == pytest.approx(summary[f"user_coverage_{name}"])
        assert summary[f"other_user_sets_{name}"] == sum(len(run) for run in sets)
        rate = summary[f"other_user_pass_rate_{name}"]
        assert (rate is None) == (not summary[f"other_user_sets_{name}"]) and (rate is None or 0 <= rate <= 1)
    assert summary["other_user_sets_true"] == sum(len(true_rules(ex)) >= 2 for ex in test)
    report = (config.out / REPORT).read_text()
    # a newcomer reads the summary first: which form ran, and the command of the other
    assert summary["form"] == "short" and report.index("## Summary") < report.index("## Judge")
    assert "**The short form**" in report and "`persetrain demo parl --full`" in report
    assert (
        "An ensemble: each member alone scores" in report
        and "each from the last's merged model: `colon:1,all:1`" in report
    )
    assert "1 GRPO steps of 2 user(s) each" in report and "and 2 other users' texts per user" in report
    assert "distractor checks" in report
    assert "## Personal or generic: the other-user pass rate" in report and "| true (checkers) |" in report
    assert "## GRPO reward curve" in report and "| run (seed) | trained | untrained |" in report
    assert json.loads((config.out / SUMMARY).read_text())["max_diff_p_value"] == summary["max_diff_p_value"]

    # a second run finds every stage recorded: nothing is trained again
    (config.out / REPORT).unlink()
    marker = config.out / "verifier" / "merged" / "config.json"
    before = marker.stat().st_mtime_ns
    again = run_parl_demo(config)
    assert marker.stat().st_mtime_ns == before and again["judge_s"] == summary["judge_s"]
    assert (config.out / REPORT).is_file()


def test_the_short_form_is_the_default_and_full_is_the_measurement(tmp_path):
    """``persetrain demo parl`` runs the short form's sizes; ``--full`` the full form's (what benchmarks/parl.py
    runs), both from the demo's parl.yaml; a --config file's knobs, then values given, override either."""
    short, full = demo_config(), demo_config(full=True)
    assert short.form == "short" and full.form == "full"
    assert full == ParlDemoConfig(form="full", **FORM_KNOBS["full"])
    short_knobs = {key: getattr(short, key) for key in FORM_KNOBS["short"]}
    assert short_knobs == {**FORM_KNOBS["short"], "judge_curriculum": parse_curriculum("colon+lowercase:150")}
    assert short.judge_curriculum == ((("colon", "lowercase"), 150),) and full.grpo_steps == 46
    assert short.judge_seeds == full.judge_seeds == 1  # what short does not set is the full form's
    given = demo_config(out=tmp_path, grpo_steps=9, judge=None)
    assert given.grpo_steps == 9 and given.out == tmp_path and given.runs == FORM_KNOBS["short"]["runs"]
    knobs = tmp_path / "knobs.yaml"
    knobs.write_text("judge_seeds: 2\nheldout_users: null\ngrpo_steps: 3\n")
    mine = demo_config(config=knobs, grpo_steps=5)
    assert (mine.judge_seeds, mine.heldout_users, mine.grpo_steps, mine.runs) == (2, None, 5, 2)
    knobs.write_text("judge_seed: 2\n")
    with pytest.raises(InputError, match=r"knobs.yaml: field 'judge_seed': not a knob of the demo; the knobs are"):
        demo_config(config=knobs)
    knobs.write_text("grpo_steps: many\n")
    with pytest.raises(InputError, match=r"knobs.yaml: field 'grpo_steps': Input should be a valid integer"):
        demo_config(config=knobs)
    with pytest.raises(ValueError, match="form is one of"):
        ParlDemoConfig(**{**form_knobs(True), "form": "medium"})


def test_the_summary_says_what_was_trained_measured_and_meant():
    s = {
        "form": "short",
        "judge_rules": ["colon", "lowercase"],
        "judge_curriculum": "colon+lowercase:150",
        "judge_own_rules_checks": 192,
        "judge_own_rules_accuracy": 0.8177,
        "judge_own_rules_accuracy_untrained": 0.4115,
        "judge_heldout_checks": 502,
        "judge_heldout_accuracy": 0.5876,
        "judge_heldout_accuracy_untrained": 0.4661,
        "warmstart_rows": 8,
        "grpo_steps": 4,
        "heldout_users": 4,
        "max_diff_trained": 0.5,
        "max_diff_untrained": 0.5,
        "max_diff_p_value": None,
        "other_user_pass_rate_trained": 0.2,
        "other_user_pass_rate_untrained": 0.3,
        "other_user_pass_rate_true": 0.05,
    }
    text = " ".join(" ".join(summary_section(s)).split())
    assert "**The short form**" in text and "rules: colon, lowercase" in text
    assert "right 0.588 of the time, the untrained model 0.466" in text and "(192): 0.818 against 0.411" in text
    assert "reads rules on users it never saw better than the untrained model" in text
    assert "GRPO did not raise Max-Diff measurably" in text and "not a result" in text
    worse = {**s, "form": "full", "judge_heldout_accuracy": 0.4, "max_diff_trained": 0.9, "max_diff_p_value": 0.01}
    text = " ".join(" ".join(summary_section(worse)).split())
    assert "**The full form**" in text and "no better than the untrained model" in text
    assert "GRPO raised Max-Diff on held-out users (p < 0.05)" in text


def test_curriculum_parses_and_refuses_a_malformed_stage():
    assert parse_curriculum("colon+lowercase:300, all:600") == ((("colon", "lowercase"), 300), ((), 600))
    assert format_curriculum(parse_curriculum(JUDGE_CURRICULUM)) == JUDGE_CURRICULUM
    with pytest.raises(ValueError, match=r"stage 'colon' is not RULE\[\+RULE\.\.\.\]:STEPS or all:STEPS"):
        parse_curriculum("colon,all:5")
    with pytest.raises(ValueError, match="stages of at least 1 step"):
        demo_config(judge_curriculum=parse_curriculum("all:0"))


@pytest.mark.slow
def test_a_demo_stopped_by_sigterm_in_its_judge_training_resumes_it(tiny_llama_dir, tmp_path):
    """SIGTERM while the verifier's second stage trains: the command stops with 128 + 15 and records no judge (the
    stage's run directory holds a checkpoint, not a model); the same demo again keeps the finished first stage and
    resumes the second from its checkpoint."""
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "persetrain.cli", "demo", "parl", "--out", str(out)]
    knobs = tmp_path / "knobs.yaml"
    knobs.write_text("judge_curriculum: colon:1,all:40\njudge_train_rows: 64\n")  # a loss logged each 10 steps
    command += ["--model", str(tiny_llama_dir), "--config", str(knobs)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = out / "verifier" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while process.poll() is None and not (metrics.is_file() and '"loss"' in metrics.read_text()):
        assert time.monotonic() < deadline, "the verifier logged no step in 300 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped:" in output and "run the same command again to resume it" in " ".join(output.split())
    recorded = json.loads((out / SUMMARY).read_text()) if (out / SUMMARY).is_file() else {}
    assert "judge_s" not in recorded
    checkpoints = sorted((out / "verifier").glob("checkpoint-*"))
    assert len(checkpoints) == 1 and not (out / "verifier" / "merged").exists()
    stopped_at = int(checkpoints[0].name.split("-")[1])
    assert 10 <= stopped_at < 40
    first_stage = out / "verifier-stage-0" / "merged" / "config.json"
    before = first_stage.stat().st_mtime_ns  # the first stage had finished

    config = demo_config(
        full=True,
        config=knobs,
        out=out,
        model=str(tiny_llama_dir),
        warmstart_users=2,
        warmstart_copies=1,
        grpo_steps=1,
        heldout_users=2,
        runs=1,
        max_new_tokens=8,
    )
    summary = run_parl_demo(config)
    assert first_stage.stat().st_mtime_ns == before  # not trained again
    resolved = json.loads((out / "verifier" / "resolved_config.json").read_text())
    assert resolved["resume_from_checkpoint"] == str(checkpoints[0])
    assert summary["judge"] == str(out / "verifier" / "merged") and summary["judge_s"] >= 0
    steps = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert max(r["step"] for r in steps if r["event"] == "log" and "loss" in r) == 40
