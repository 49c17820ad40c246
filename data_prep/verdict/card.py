"""The card of the judge dataset: ``build_info.json`` (machine-read) and ``README.md`` (the card).

Besides the sources, licenses and sizes every prepared dataset's card gives, it records the verdict balance: the
gold letters' counts per split. A question written in several orders of its options puts the gold at several
positions, so a position-balanced set has each letter about equally often; a lopsided count is a set on which a
judge favouring one letter is rewarded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from data_prep.card import bullets, render_card, source_topic_table, synthetic_note
from data_prep.licenses import License, of_sources
from data_prep.preference.card import source_lines, source_topic_counts
from persetrain.prompts.verdict import THINK_WORDS, VERDICT_MARK

FORMAT = (
    "TRL GRPOTrainer, conversational prompt-only format (`persetrain grpo` reads it) with the gold verdict and the "
    "columns the `verdict-*` rewards read"
)

MODES = {
    "verdict": "the judge answers with the verdict alone. A PrefEval row's prompt is exactly the `mcq-letter` "
    "evaluator's, ending with an assistant message `Answer: `, and a yes / no row's prompt is its verifier prompt "
    "unchanged, so the trained judge is measured by `mcq-letter` / `verifier` as any model is.",
    "think": f"the judge writes a rationale of at most {THINK_WORDS} words, then a last line `{VERDICT_MARK} X`; "
    "only that line is read (the `verdict` evaluator reads it the same way).",
}

COLUMNS = (
    "`id` (`<item_id>:o<k>`, k the order variant), `item_id` (the question: its order variants share it), `order` "
    "(list[int]: `order[p]` is the index, in the question's own options, of the option shown at position p; for a "
    "yes / no row [k], the k-th candidate of its group, or [] for a check alone), `n_orders` (the item's number of "
    "variants: of a yes / no group, its candidates), `source` (prefeval, perse, parl-verifier or <source>-verifier "
    "for a verifier view with a source column, e.g. prefeval-verifier), "
    "`topic`, `kind` (`choice` or `yes-no`), `mode`, `verdicts` (the allowed verdicts: `A`..`D` for four options, "
    "`yes`, `no`), `gold` (the gold verdict: the letter the preferred option is shown at, or yes / no), `prompt` "
    "(conversational messages; an assistant prefix is the last message), `prompt_blind` (the same without the "
    "person), and for choice rows `preference` (the person: a stated preference or a profile), `question`, "
    "`options` (in this row's order) and `gold_index` (int), so a row is also an mcq example; yes / no rows hold "
    '"", "", [] and -1 there.'
)

SPLIT_RULE = (
    "As `persetrain prepare preference` splits: PrefEval topics named by `--holdout-topics` form the validation "
    "split, every other topic is in train; PerSE keeps its person-disjoint train/test split (test -> validation; a "
    "one-split source is split by reviewer); a verifier dataset keeps its own train / validation. Every order "
    "variant of a question is in the split of its question."
)

ORDER_RULE = (
    "Rows are shuffled by item with `random.Random(seed)`; the order variants of an item are ADJACENT and in variant "
    "order (0: the question's own order, 1: its reverse, then rotations), so GRPO must train with "
    "`shuffle_dataset: false` for one step to hold every order of a question (the `verdict-consistent` reward)."
)


def _balance(rows: Mapping[str, Sequence[dict]]) -> dict[str, dict[str, dict[str, int]]]:
    """Gold verdict counts per split and row kind."""
    balance: dict[str, dict[str, dict[str, int]]] = {}
    for split, split_rows in rows.items():
        kinds = sorted({r["kind"] for r in split_rows})
        balance[split] = {
            kind: dict(sorted(Counter(r["gold"] for r in split_rows if r["kind"] == kind).items())) for kind in kinds
        }
    return balance


def build_info(
    rows: Mapping[str, Sequence[dict]], sources: Sequence[dict], dropped: Mapping[str, int], settings: Mapping
) -> dict:
    """What ``build_info.json`` holds: the task kind, mode, sources, sizes, counts, verdict balance, settings."""
    return {
        "name": "verdict",
        "title": f"Judge verdict prompts ({settings['mode']} mode)",
        "task": "judge_verdicts",
        "format": FORMAT,
        "mode": settings["mode"],
        **of_sources(sources).info(),
        "synthetic": any(s.get("synthetic") for s in sources),
        "sources": list(sources),
        "params": dict(settings),
        "splits": {split: len(r) for split, r in rows.items()},
        "items": {split: len({row["item_id"] for row in r}) for split, r in rows.items()},
        "counts": source_topic_counts(rows),
        "verdict_balance": _balance(rows),
        "dropped": dict(dropped),
        "split_rule": SPLIT_RULE,
        "order_rule": ORDER_RULE,
    }


def readme(info: dict) -> str:
    """The dataset card."""
    synthetic = [s["path"] for s in info["sources"] if s.get("synthetic")]
    intro = [
        "Verdict prompts with their gold verdict, for a judge trained by GRPO on its own verdicts (the "
        "`verdict-correct`, `verdict-format` and `verdict-consistent` rewards). Each row asks which option is best "
        "for a person (`choice`: a letter) or whether a text passes a check (`yes-no`). Task kind "
        f"`{info['task']}`; format: {info['format']}. Built by `persetrain prepare verdict` "
        "(`data_prep/verdict/prepare.py`); the wording of every prompt is `persetrain.prompts.verdict`.\n",
        f"Mode `{info['mode']}`: {MODES[info['mode']]}\n",
        ORDER_RULE + "\n",
    ]
    if synthetic:
        intro.append(
            synthetic_note(
                f"The sources {', '.join(f'`{p}`' for p in synthetic)} are SYNTHETIC (generated samples with planted "
                "preferences or signatures), not real people."
            )
        )
    table = source_topic_table(info, {"all rows": info["splits"], "items (questions)": info["items"]})
    return render_card(
        info["title"],
        tags=("judge", "grpo", "personalized-evaluation"),
        license=License.from_info(info),
        synthetic=info["synthetic"],
        intro=intro,
        sections=[
            ("Sources", "\n".join(source_lines(info["sources"]))),
            ("Splits", info["split_rule"] + "\n\n" + table),
            (
                "Verdict balance",
                "Gold verdicts per split and row kind. A question in several orders shows its gold at several "
                "positions, so a position-balanced set has each letter about equally often.\n\n"
                + bullets(info["verdict_balance"]),
            ),
            ("Columns", COLUMNS),
            ("Settings", bullets(info["params"])),
            ("Left out", bullets(info["dropped"]) if info["dropped"] else None),
        ],
    )
