"""The cards of the preference datasets: ``build_info.json`` (machine-read) and ``README.md`` (the card).

Like every prepared dataset's, the card declares the task kind, where the data came from and under
which license, how the splits were made, and the counts a user checks before training: rows per
topic and split, where the gold option lands in the listwise view (the shuffle must not leave a
position bias), and the verifier's yes/no balance (kept as it is: one ``yes`` row per group, one
``no`` row per other option; a trainer that wants balance reweights, the data does not duplicate).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from data_prep.card import bullets, render_card, source_topic_table
from data_prep.licenses import License, of_sources

#: Per view: the task kind ``build_info.json`` declares, the format, and its columns.
VIEWS: dict[str, dict[str, str]] = {
    "listwise": {
        "task": "mcq",
        "title": "listwise: one row per question",
        "format": "persetrain mcq records (`persetrain evaluate --data` reads them) plus reward-model contexts",
        "columns": "`id`, `source`, `topic`, `person_label`, `preference` (the person: a stated preference or a "
        "profile), `question` (the request), `options` (list[str], shuffled), `gold` (index of the "
        "preferred option), `explanation`, `prompt` (= `rm_context(preference, question, person_label)`), "
        "`prompt_blind` (= `rm_context(None, question)`).",
    },
    "pairs": {
        "task": "preference_pairs",
        "title": "pairs: one row per (preferred, other) option pair",
        "format": "TRL RewardTrainer, standard (non-conversational) preference format with an explicit prompt",
        "columns": "`id` (`<group_id>:<index of the rejected option>`), `group_id` (the listwise row), `source`, "
        "`topic`, `prompt` (the reward model's context, ends with `Answer: `), `prompt_blind` (the "
        "context without the person), `chosen` (the preferred option), `rejected` (another option).",
    },
    "verifier": {
        "task": "verifier_sft",
        "title": "verifier: one yes/no row per option",
        "format": "TRL SFTTrainer, conversational prompt-completion format (`persetrain sft` reads it)",
        "columns": "`id` (`<group_id>:<option index>`), `group_id`, `source`, `topic`, `label` (`yes` for the "
        "preferred option, else `no`), `person` (the person text the prompt shows), `prompt` (system + user "
        "messages of the VERIFIER template), "
        "`prompt_blind` (the VERIFIER_BLIND messages), `completion` "
        '(`[{"role": "assistant", "content": label}]`).',
    },
}

SPLIT_RULE = (
    "PrefEval: whole topics are split: the topics named by `--holdout-topics` form the validation split, every "
    "other topic is in train (default: none held out, so every PrefEval topic is in train and PrefEval adds "
    "nothing to validation). PerSE and reference sources keep their own person-disjoint train/test split "
    "(test -> validation); a source with one split is split by person, validation when "
    '`int(sha256(f"{seed}:{person_id}"), 16) % 4 == 0`. The three views share the split of their group, so '
    "no question, reviewer pair or user input is in two splits of any of them."
)


def source_topic_counts(rows: Mapping[str, Sequence[dict]]) -> dict[str, dict[str, int]]:
    """Rows per ``source/topic`` per split: the table of a card."""
    return {
        split: dict(sorted(Counter(f"{r['source']}/{r['topic']}" for r in split_rows).items()))
        for split, split_rows in rows.items()
    }


def _balance(view: str, rows: Mapping[str, Sequence[dict]]) -> dict[str, dict]:
    if view == "listwise":
        return {
            split: {"gold_position": dict(sorted(Counter(str(r["gold"]) for r in split_rows).items()))}
            for split, split_rows in rows.items()
        }
    if view == "verifier":
        out = {}
        for split, split_rows in rows.items():
            labels = Counter(r["label"] for r in split_rows)
            out[split] = {
                "yes": labels["yes"],
                "no": labels["no"],
                "yes_share": round(labels["yes"] / len(split_rows), 4) if split_rows else None,
            }
        return out
    return {split: {"pairs": len(split_rows)} for split, split_rows in rows.items()}


def build_info(
    view: str,
    rows: Mapping[str, Sequence[dict]],
    sources: Sequence[dict],
    dropped: Mapping[str, int],
    settings: Mapping[str, object],
) -> dict:
    """What ``build_info.json`` holds: the task kind (``persetrain.data`` reads it), sources, counts, settings."""
    return {
        "name": view,
        "title": f"Preference data ({VIEWS[view]['title']})",
        "task": VIEWS[view]["task"],
        "format": VIEWS[view]["format"],
        **of_sources(sources).info(),
        "synthetic": any(s.get("synthetic") for s in sources),
        "sources": list(sources),
        "params": dict(settings),
        "splits": {split: len(r) for split, r in rows.items()},
        "counts": source_topic_counts(rows),
        "class_balance": _balance(view, rows),
        "dropped": dict(dropped),
        "split_rule": SPLIT_RULE,
    }


def source_lines(sources: Sequence[dict]) -> list[str]:
    """One card line per source: what it is, where it came from, its license and whether it is SYNTHETIC."""
    lines = []
    for s in sources:
        if s["kind"] == "prefeval":
            lines.append(
                f"- PrefEval ({s['citation']}), folders {', '.join(f'`{p}`' for p in s['paths'])}. "
                f"License: **{s['license']}** (attribution, non-commercial use only)."
            )
        else:
            lines.append(
                f"- {s['kind']}: `{s['path']}`"
                + (" (**SYNTHETIC** data)" if s.get("synthetic") else "")
                + f"; license: {of_sources([s]).name}."
            )
    return lines


def readme(info: dict) -> str:
    """The dataset card of one view."""
    view = VIEWS[info["name"]]
    return render_card(
        info["title"],
        tags=("preference", "personalized-evaluation"),
        license=License.from_info(info),
        synthetic=info["synthetic"],
        intro=[
            f"Task kind `{info['task']}`; format: {view['format']}. Built by `persetrain prepare preference` "
            "(`data_prep/preference/prepare.py`); the wording of every prompt is `persetrain.prompts.preference`.\n"
        ],
        sections=[
            ("Sources", "\n".join(source_lines(info["sources"]))),
            ("Splits", info["split_rule"] + "\n\n" + source_topic_table(info, {"all": info["splits"]})),
            ("Class balance", bullets(info["class_balance"])),
            ("Columns", view["columns"]),
            ("Settings", bullets(info["params"])),
            ("Left out", bullets(info["dropped"]) if info["dropped"] else None),
        ],
    )
