"""``report.md`` of ``persetrain demo parl``, written from its ``summary.json`` alone (so a finished run can be
reported again without recomputing a stage): the judge, the GRPO reward curve, Max-Diff per run with the paired
t-test, and the other-user pass rates."""

from __future__ import annotations

from pathlib import Path

from persetrain.io import atomic_write


def _number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _better(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a > b


def summary_section(s: dict) -> list[str]:
    """What a newcomer reads first: which form ran, what was trained, what was measured, what it means."""
    short = s.get("form") == "short"
    form = (
        "**The short form**: the full demo's stages at small sizes, so that it ends within 15 minutes on 2 CPU cores; "
        "every number in this report is this run's own. `persetrain demo parl --full` runs the full demo (55-70 "
        "minutes here), the measurement `benchmarks/parl.py` reports."
        if short
        else "**The full form** (`persetrain demo parl --full`): the sizes `benchmarks/parl.py` measures with."
    )
    rules = ", ".join(s["judge_rules"]) if s.get("judge_rules") else "every signature rule"
    steps = s.get("judge_curriculum") or "given, not trained here"
    own = (
        f" On the checks of the rules it trained on ({s['judge_own_rules_checks']}): "
        f"{_number(s['judge_own_rules_accuracy'])} against {_number(s['judge_own_rules_accuracy_untrained'])}."
        if s.get("judge_own_rules_checks")
        else ""
    )
    judge_ok = _better(s["judge_heldout_accuracy"], s["judge_heldout_accuracy_untrained"])
    judge_meaning = (
        "The judge reads rules on users it never saw better than the untrained model, so the GRPO reward has a signal."
        if judge_ok
        else "The judge is no better than the untrained model here, so the GRPO reward carries little signal."
    )
    p = s.get("max_diff_p_value")
    grpo_ok = _better(s["max_diff_trained"], s["max_diff_untrained"]) and p is not None and p < 0.05
    grpo_meaning = (
        "GRPO raised Max-Diff on held-out users (p < 0.05): the trained generator's rules tell a user's own text from "
        "model-written text more often than the untrained generator's."
        if grpo_ok
        else "GRPO did not raise Max-Diff measurably on held-out users in this run"
        + (": a few steps of a 135M generator are a first taste of the loop, not a result." if short else ".")
    )
    return [
        "## Summary\n",
        form + "\n",
        f"- **Trained**: a rule verifier, the judge (the embedded model with LoRA; rules: {rules}; stages "
        f"rules:steps `{steps}`), which answers whether a headline satisfies a rule; and a rubric generator, "
        f"warm-started on {s['warmstart_rows']} rubric sets and trained by GRPO for {s['grpo_steps']} steps, rewarded "
        "by the judge when its rules pass on the user's own headline and fail on model-written ones.",
        f"- **Measured**: on {s['judge_heldout_checks']} checks of held-out users in rule wordings it never saw, the "
        f"judge is right {_number(s['judge_heldout_accuracy'])} of the time, the untrained model "
        f"{_number(s['judge_heldout_accuracy_untrained'])}.{own} Max-Diff of the generated rubric sets on "
        f"{s['heldout_users']} held-out users: trained {_number(s['max_diff_trained'])}, untrained "
        f"{_number(s['max_diff_untrained'])} (p = {_number(p)}). Other-user pass rate (lower: more personal): "
        f"trained {_number(s['other_user_pass_rate_trained'])}, untrained "
        f"{_number(s['other_user_pass_rate_untrained'])}, the users' true sets "
        f"{_number(s['other_user_pass_rate_true'])}.",
        f"- **Meaning**: {judge_meaning} {grpo_meaning}\n",
    ]


def write_report(path: Path, s: dict) -> None:
    """``report.md``: the summary, the judge, the reward curve, Max-Diff per run and the paired t-test."""
    per_rule = " ".join(f"{k} {v:.2f}" for k, v in s["judge_heldout_per_rule"].items())
    curve = "\n".join(
        f"| {r['step']} | {_number(r['reward'])} | {_number(r['valid_share'], 2)} | {_number(r['mean_d'])} |"
        for r in s["curve"]
    )
    runs = "\n".join(
        f"| {k} | {_number(t)} | {_number(u)} |"
        for k, (t, u) in enumerate(zip(s["max_diff_trained_runs"], s["max_diff_untrained_runs"], strict=True))
    )
    lines = [
        "# PARL demo (SYNTHETIC users)\n",
        *summary_section(s),
        f"Held-out users: {s['heldout_users']}, never trained on by the judge or the generator. Wall time "
        f"{s['total_s']:.0f} s (judge {s['judge_s']:.0f}, warm start {s['warmstart_s']:.0f}, GRPO {s['grpo_s']:.0f}, "
        f"evaluation {s['untrained_s'] + s['trained_s'] + s['separation_s']:.0f}).\n",
        "## Judge\n",
        f"Rule verifier `{s['judge']}` on {s['judge_heldout_checks']} held-out checks (rule wordings it never saw): "
        f"accuracy **{s['judge_heldout_accuracy']:.3f}** (yes share {s['judge_heldout_yes_share']:.2f}); the untrained "
        f"model {s['judge_heldout_accuracy_untrained']:.3f} (yes share {s['judge_heldout_yes_share_untrained']:.2f}). "
        f"Per rule: {per_rule}.\n",
        *(
            [f"Trained in stages (rules:steps), each from the last's merged model: `{curriculum}`.\n"]
            if (curriculum := s.get("judge_curriculum"))
            else []
        ),
        *(
            [
                f"On {s['judge_distractor_checks']} distractor checks (generic rules no user plants, some of kinds it "
                f"never trained on): accuracy **{s['judge_distractor_accuracy']:.3f}**.\n"
            ]
            if "judge_distractor_accuracy" in s
            else []
        ),
        *(
            [f"An ensemble: each member alone scores {', '.join(f'{a:.3f}' for a in members)}.\n"]
            if (members := s.get("judge_heldout_accuracy_members"))
            else []
        ),
        "## GRPO reward curve\n",
        f"Warm start ({s['warmstart_source']}, {s.get('warmstart_samples', 0)} extra samples of users): "
        f"{s['warmstart_rows']} rubric sets, valid share {s['valid_share_warmstart']:.2f}. "
        f"{s['grpo_steps']} GRPO steps of {s.get('grpo_prompts', 1)} user(s) each; the reward's negatives are the "
        f"generators' outputs and {s.get('user_negatives', 0)} other users' texts per user.\n",
        "| step | mean reward | valid share | mean D |\n|---:|---:|---:|---:|\n" + curve + "\n",
        f"Mean D first fifth {_number(s['mean_d_first_fifth'])}, last fifth {_number(s['mean_d_last_fifth'])}; "
        f"valid share {_number(s['valid_share_first_fifth'], 2)} -> {_number(s['valid_share_last_fifth'], 2)}.\n",
        "## Max-Diff on held-out users\n",
        "| run (seed) | trained | untrained |\n|---:|---:|---:|\n" + runs + "\n",
        f"Mean ± std: trained {_number(s['max_diff_trained'])} ± {_number(s['max_diff_trained_std'])}, untrained "
        f"{_number(s['max_diff_untrained'])} ± {_number(s['max_diff_untrained_std'])}; one-sided paired t-test "
        f"(trained > untrained) p = {_number(s['max_diff_p_value'])}.\n",
        "## Personal or generic: the other-user pass rate\n",
        "The share of the other held-out users' texts on which every valid rule of a set passes (the judge above), "
        "averaged over the sets Max-Diff scored in every run; lower is more personal. The users' true sets, by the "
        "signature checkers, are the floor.\n",
        "| sets | scored sets | other-user pass rate |\n|---|---:|---:|\n"
        + "\n".join(
            f"| {name} | {s[f'other_user_sets_{key}']} | {_number(s[f'other_user_pass_rate_{key}'])} |"
            for name, key in (("trained", "trained"), ("untrained", "untrained"), ("true (checkers)", "true"))
        )
        + "\n",
    ]
    with atomic_write(path) as f:
        f.write("\n".join(lines))
