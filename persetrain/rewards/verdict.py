"""Rewards of the verdict judges: judges trained by GRPO on their own verdicts (data of ``persetrain prepare
verdict``).

A judge is asked a verdict prompt (:mod:`persetrain.prompts.verdict`: which lettered option is best for this person,
or a yes / no check) and sampled in groups; it is rewarded when its final verdict matches the gold one. Four TRL
reward functions, named as the recipe's ``reward_funcs`` name them (:data:`VERDICT_REWARDS`):

- ``verdict-correct`` (:func:`verdict_correct`): 1 when the parsed verdict is the gold one.
- ``verdict-correct-balanced`` (:func:`verdict_correct_balanced`): the same, weighted so that each gold verdict of an
  item (a question's candidates) pays as much in all: a question's one "yes" candidate as much as its three "no" ones.
- ``verdict-format`` (:func:`verdict_format`): 1 when a verdict can be parsed at all; a small weight of it keeps a
  ``think`` judge ending on its ``Verdict: X`` line while the verdict reward is still mostly 0.
- ``verdict-consistent`` (:func:`verdict_consistent`): J1's position-consistent reward, 1 only when the judge is right
  in every order the candidates were shown in, which leaves nothing to gain from a favourite position.

TRL 1.16 calls each as ``f(prompts=, completions=, completion_ids=, **dataset_columns, trainer_state=,
log_extra=, log_metric=)``, every dataset column a list parallel to ``completions``; what a reward does not read it
ignores. The columns read are ``verdicts`` (the row's allowed verdicts), ``mode`` (``verdict`` or ``think``),
``gold`` and, for the balanced and consistent rewards, ``item_id`` (and ``order``); ``id``, when present, names a
row in errors.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from persetrain.io import InputError
from persetrain.prompts.verdict import MODES, VERDICT_MARK, check_mode
from persetrain.rewards.parl_trl import completion_text

if TYPE_CHECKING:
    from datasets import Dataset

#: Stripped from both ends of the verdict word: "(B)", "B)", "A.", "**yes**", "no," all read as their verdict.
_PUNCTUATION = "()[]{}<>.,:;!?\"'*`_"
#: Leads a ``verdict`` mode completion may open with before its verdict.
_LEADS = (VERDICT_MARK.lower(), "answer:")


def _verdict_word(text: str, verdicts: Sequence[str]) -> str | None:
    """The first word of ``text``, unwrapped from punctuation, if it is one of ``verdicts`` (in their spelling)."""
    words = text.split()
    if not words:
        return None
    spelling = {v.lower(): v for v in verdicts}
    return spelling.get(words[0].strip(_PUNCTUATION).lower())


def parse_verdict(text: str, verdicts: Sequence[str], mode: str) -> str | None:
    """The verdict a completion gives, spelled as in ``verdicts``; None when it gives none.

    ``verdict`` mode: the completion is the verdict, so its first word decides ("A", "A.", "(B)", "B) because",
    "Yes", "no."), also after a ``Verdict:`` or ``Answer:`` lead; what follows the word is ignored. ``think``
    mode: only the last non-empty line counts, and it must be ``Verdict: X`` (either case): a verdict named in
    the rationale is not an answer, or a judge could hedge by naming every option and be read as choosing one.
    """
    check_mode(mode)
    text = text.strip()
    if mode == "think":
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines or not lines[-1].lower().startswith(VERDICT_MARK.lower()):
            return None
        return _verdict_word(lines[-1][len(VERDICT_MARK) :], verdicts)
    lead = next((lead for lead in _LEADS if text.lower().startswith(lead)), "")
    return _verdict_word(text[len(lead) :], verdicts)


def _check_columns(reward: str, columns: dict[str, Any], needs: Sequence[str]) -> None:
    """The columns ``needs`` exist, else one line naming them and the command that writes them."""
    missing = [name for name in needs if name not in columns]
    if missing:
        raise KeyError(
            f"the {reward} reward needs the dataset column(s) {', '.join(missing)}; write the dataset with "
            "`persetrain prepare verdict`"
        )


def _parsed(reward: str, completions: Sequence, columns: dict[str, Any], needs: Sequence[str]) -> list[str | None]:
    """Every completion's verdict, after checking that the columns ``needs`` exist and each row's mode and gold."""
    _check_columns(reward, columns, needs)
    ids = columns.get("id")
    parsed = []
    for i, completion in enumerate(completions):
        row = f"row {ids[i]!r}" if ids is not None else f"row {i} of the batch"
        mode, verdicts = columns["mode"][i], columns["verdicts"][i]
        if mode not in MODES:
            raise ValueError(f"{reward}: {row} has mode {mode!r}; the mode column holds one of {', '.join(MODES)}")
        if "gold" in needs and columns["gold"][i] not in verdicts:
            gold = columns["gold"][i]
            raise ValueError(f"{reward}: {row} has gold {gold!r}, which is not one of its verdicts {list(verdicts)}")
        parsed.append(parse_verdict(completion_text(completion), verdicts, mode))
    return parsed


def verdict_correct(completions: Sequence, log_metric: Callable | None = None, **columns: Any) -> list[float]:
    """1.0 where the parsed verdict is the row's ``gold``, else 0.0 (an unparsable completion is wrong).

    Logs ``verdict/accuracy`` and ``verdict/entropy`` (:func:`_log_verdicts`).
    """
    parsed = _parsed("verdict-correct", completions, columns, ("gold", "verdicts", "mode"))
    right = [p == gold for p, gold in zip(parsed, columns["gold"], strict=True)]
    _log_verdicts(log_metric, parsed, right, columns)
    return [float(ok) for ok in right]


def _log_verdicts(
    log_metric: Callable | None, parsed: Sequence[str | None], right: Sequence[bool], columns: dict[str, Any]
) -> None:
    """Log ``verdict/accuracy`` (the batch's share of right verdicts, ``right``) and ``verdict/entropy``
    (:func:`verdict_entropy` of ``parsed``) through TRL's ``log_metric``.

    Why every reward that reads the gold logs them: they describe the judge's sampled verdicts, whichever reward pays
    for them, and ``benchmarks/judge_rl.py`` reads its reward and entropy curves from them. Two such rewards in one
    recipe log the same values, which TRL averages per step."""
    if log_metric is None or not right:
        return
    log_metric("verdict/accuracy", sum(right) / len(right))
    log_metric("verdict/entropy", verdict_entropy(parsed, columns.get("id") or columns.get("prompts")))


def verdict_correct_balanced(completions: Sequence, log_metric: Callable | None = None, **columns: Any) -> list[float]:
    """:func:`verdict_correct` with each gold verdict of an item weighted to pay as much in all (sklearn's "balanced"
    class weight inside each item of the batch): a right verdict on a row of item g with gold v earns
    n_g / (k_g * n_gv), where n_g is the item's completions in the batch, k_g how many distinct golds they have and
    n_gv how many have gold v. An item with one candidate of each gold (the balanced pair) earns exactly
    :func:`verdict_correct`'s rewards, as does an item whose rows share one gold.

    Why: a yes / no judge shown every candidate of a question (one "yes", three "no") earns 0.75 by answering "no"
    to everything under :func:`verdict_correct`, and GRPO drives it there: it collapsed onto "no" within 60 steps.
    Weighted, answering one verdict to every candidate earns the item's mean weight whichever it is, so only telling
    the candidates apart pays, and the judge still sees every "no" candidate, as the listwise reward model does.
    Logs what :func:`verdict_correct` logs (the unweighted share of right verdicts among them).
    """
    _check_columns("verdict-correct-balanced", columns, ("gold", "verdicts", "mode", "item_id"))
    right = verdict_correct(completions, log_metric=log_metric, **columns)
    keys = list(zip(columns["item_id"], columns["gold"], strict=True))
    per_gold = Counter(keys)
    per_item = Counter(item for item, _ in keys)
    golds = Counter(item for item, _ in per_gold)
    return [
        ok * per_item[item] / (golds[item] * per_gold[item, gold]) for ok, (item, gold) in zip(right, keys, strict=True)
    ]


def verdict_entropy(parsed: Sequence[str | None], prompts: Sequence | None) -> float:
    """The mean over prompts of the entropy (bits) of the verdicts sampled for it (an unparsable one counts as a
    verdict of its own).

    Why: a judge whose every rollout of a prompt gives one verdict has a group with equal rewards, and no gradient;
    this falling to 0 is the collapse TRL's ``frac_reward_zero_std`` then shows. TRL's ``entropy`` is the policy's
    mean token entropy, the verdict's and the end-of-sequence token's together. ``prompts``: what tells a row's
    prompt (the ``id`` column, else the prompts); each prompt's rollouts are consecutive in TRL's batch.
    """
    groups: list[Counter] = []
    last = object()
    for i, verdict in enumerate(parsed):
        key = prompts[i] if prompts is not None else i
        if not groups or key != last:
            groups.append(Counter())
            last = key
        groups[-1][verdict] += 1
    entropies = []
    for counts in groups:
        n = sum(counts.values())
        entropies.append(-sum(c / n * math.log2(c / n) for c in counts.values()))
    return sum(entropies) / len(entropies)


def verdict_format(completions: Sequence, log_metric: Callable | None = None, **columns: Any) -> list[float]:
    """1.0 where a verdict can be parsed (:func:`parse_verdict`), right or wrong, else 0.0.

    Logs ``verdict/parsed_share`` through TRL's ``log_metric``.
    """
    rewards = [float(p is not None) for p in _parsed("verdict-format", completions, columns, ("verdicts", "mode"))]
    if log_metric is not None and rewards:
        log_metric("verdict/parsed_share", sum(rewards) / len(rewards))
    return rewards


def verdict_consistent(completions: Sequence, log_metric: Callable | None = None, **columns: Any) -> list[float]:
    """J1's position-consistent reward: right only counts when the judge is right in every order of the candidates.

    ``persetrain prepare verdict`` writes an item's order variants (one question, its candidates shown in different
    orders; rows sharing ``item_id``, told apart by ``order``) next to each other, so TRL samples them in one
    batch, where each prompt's ``num_generations`` rollouts are consecutive. For completion i of item g, shown in
    variant v (its ``order``), let r be its rollout index: how many completions of the same item and variant come
    before it in the batch (0..G-1 when each prompt is sampled G times). Completion i gets 1.0 when its verdict is
    its own row's gold AND, for every other variant of g in the batch that has a completion with rollout index r,
    that completion's verdict is right too; else 0.0. Pairing rollouts by index is arbitrary (a group's rollouts are
    exchangeable) but fixed, so each rollout is coupled with exactly one rollout of every other order.

    Why: a judge that favours a position is right on the order that puts the gold there and wrong on the others,
    and earns nothing; only a verdict that follows the candidates wherever they stand is rewarded. An item with a
    single variant in the batch (a split batch, or data written with one order) reduces to :func:`verdict_correct`.
    The reward sees only the batch it is called with, so a recipe keeps every variant of an item in one process's
    generation batch (a multiple of ``n_orders`` x ``num_generations``; ``persetrain grpo`` refuses a layout that
    splits them before training). Logs what :func:`verdict_correct` logs, and ``verdict/split_item_share`` through
    TRL's ``log_metric`` (averaged over the processes): the share of the batch's completions whose item has fewer of
    its ``n_orders`` variants in the batch, rewarded by their verdict alone. It stays 0 when the layout is right.
    """
    parsed = _parsed("verdict-consistent", completions, columns, ("gold", "verdicts", "mode", "item_id", "order"))
    right = [p == gold for p, gold in zip(parsed, columns["gold"], strict=True)]
    _log_verdicts(log_metric, parsed, right, columns)
    keys = [(item, tuple(order)) for item, order in zip(columns["item_id"], columns["order"], strict=True)]
    seen: dict[tuple, int] = {}
    rollout = []
    for key in keys:
        rollout.append(seen.get(key, 0))
        seen[key] = rollout[-1] + 1
    # Whether every completion of (item, rollout index) is right, over all the item's variants in the batch.
    all_right: dict[tuple, bool] = {}
    for (item, _), r, ok in zip(keys, rollout, right, strict=True):
        all_right[item, r] = all_right.get((item, r), True) and ok
    if log_metric is not None and keys and "n_orders" in columns:
        shown: dict[str, set] = {}
        for item, order in keys:
            shown.setdefault(item, set()).add(order)
        split = [len(shown[item]) < n for (item, _), n in zip(keys, columns["n_orders"], strict=True)]
        log_metric("verdict/split_item_share", sum(split) / len(split))
    return [float(all_right[item, r]) for (item, _), r in zip(keys, rollout, strict=True)]


#: The dataset columns each reward reads.
COLUMNS: dict[str, tuple[str, ...]] = {
    "verdict-correct": ("gold", "verdicts", "mode"),
    "verdict-correct-balanced": ("gold", "verdicts", "mode", "item_id"),
    "verdict-format": ("verdicts", "mode"),
    "verdict-consistent": ("gold", "verdicts", "mode", "item_id", "order"),
}


def check_verdict_rows(ds: Dataset, path: str | Path, rewards: Sequence[str]) -> None:
    """Before training: every column the ``rewards`` read is there, and every row's verdict format (``mode``) and
    gold verdict are ones the parser knows; else one line naming the dataset, the row and the field. Found in a
    reward, the same fault would end the run mid-step with no file named."""
    needed = list(dict.fromkeys(column for name in rewards for column in COLUMNS[name]))
    missing = [column for column in needed if column not in ds.column_names]
    if missing:
        raise InputError(
            path,
            f"the {', '.join(rewards)} reward(s) read the column(s) {', '.join(missing)}, which this dataset lacks "
            "(gold verdicts and their format); write it with `persetrain prepare verdict`",
            field=missing[0],
        )
    ids = ds["id"] if "id" in ds.column_names else range(len(ds))
    golds = ds["gold"] if "gold" in needed else [None] * len(ds)
    for row_id, mode, verdicts, gold in zip(ids, ds["mode"], ds["verdicts"], golds, strict=True):
        if mode not in MODES:
            raise InputError(
                path, f"verdict format {mode!r} is not one the parser knows ({', '.join(MODES)})", row_id, "mode"
            )
        if gold is not None and gold not in verdicts:
            raise InputError(
                path, f"gold verdict {gold!r} is not one of the row's verdicts {list(verdicts)}", row_id, "gold"
            )


#: The recipe's names (``reward_funcs: [verdict-correct]``) of the reward functions.
VERDICT_REWARDS: dict[str, Callable[..., list[float]]] = {
    "verdict-correct": verdict_correct,
    "verdict-correct-balanced": verdict_correct_balanced,
    "verdict-format": verdict_format,
    "verdict-consistent": verdict_consistent,
}

#: The names these rewards had before the RL-trained judges were named ``verdict``, and the names they have now
#: (``persetrain.rewards.registry`` refuses an old one with its new name).
RENAMED_REWARDS = {
    "judge-verdict": "verdict-correct",
    "judge-format": "verdict-format",
    "judge-consistent": "verdict-consistent",
}
