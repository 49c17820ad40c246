"""``persetrain prepare verifier``: labelled (rule, text, satisfied) data for PARL's yes/no rubric judge.

PARL's reward is only as good as its judge: a judge that says "yes" to every rule gives every rubric
set the same margin. This builds supervision for ``persetrain sft`` to train that judge, in the very
prompt the reward sends (``persetrain.prompts.parl.judge_request``: task input, text, rule) with the
completion ``yes`` or ``no``, so the trained checkpoint drops in as ``reward_judge_model``.

Two sources know the truth:

* a prepared PARL dataset of the SYNTHETIC sample users (``--parl DIR``): every text (history, target,
  negatives) is checked against every signature rule of its task by ``data_prep.parl.signatures``.
  Splits follow the PARL dataset's, by user: its ``train`` users are trained on and its ``test``
  users, whose rubrics the generator is measured on, form ``validation``. Train rows use the first
  ``TRAIN_WORDINGS`` hand-written wordings of a rule and its composed ones (the same rubric frames for
  every rule, ``data_prep.parl.signatures``); validation rows only the other hand-written ones, so
  validation measures users *and* wordings the verifier never saw. ``--extra-parl DIR`` adds every user of
  another synthetic sample (another seed: new users, never the held-out ones) to train: each user's texts
  share their few signatures, so a verifier trained on few users learns them rather than the properties.
* labelled rows from anywhere else (``--labels FILE.jsonl``): ``{task, input, text, rule, satisfied,
  split}`` per line (``split`` is ``train`` or ``validation``), e.g. human annotations of real rubrics.

With ``--counterfactuals``, each synthetic train text also comes in edited copies that toggle one signature
each (``data_prep.parl.edits``): minimal pairs that only reading the property a rule names explains. A
text with a signature that is a class of forms (a pet word, an opener) also comes in its other forms,
checked against that rule only: the rule names the class, and each user writes one member of it.

With ``--distractors``, every original text (not the edited copies) is also checked against *distractor rules*
(``data_prep.parl.distractors``): generic slotted properties no user plants ("opens with the word 'X'", "is
written entirely in capital letters"), one "yes" and one "no" check per text. Without them the verifier passes
almost any rule it never trained on, and GRPO fills rubric sets with such rules; with them it reads the kinds it
trained on better, not the kinds it never saw (``docs/findings/2026-11-27-parl-distractors-user-negatives.md``).
Validation also holds distractors that train never has (``HELD_OUT``). Their rows are named ``distractor:<name>``
in ``rule_name``.

Per split and rule, the majority answer is subsampled to the minority's count (seeded): a judge
trained on mostly "no" would learn the prior, which is the failure this data exists to fix. The card
records the counts before and after.

``--rules NAME`` keeps the checks of those signature rules only, chosen after balancing: the rows are exactly
the full dataset's rows of those rules, so the stages of a rule curriculum (a verifier trained on two rules
first, then on all of them from that checkpoint: ``judge_curriculum`` of ``persetrain demo parl``) see the same
checks. A verifier trained on every rule at once sits at loss ln 2 for hundreds of steps while it learns to
route by rule; one that has learned two rules learns the others from there
(``docs/findings/2026-11-27-parl-verifier-curriculum.md``).
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

from data_prep.card import render_card, synthetic_note, write_card
from data_prep.licenses import SYNTHETIC, License, combine, source_terms
from data_prep.parl.distractors import RULE_PREFIX, distractor_checks, words
from data_prep.parl.signatures import RULES, TRAIN_WORDINGS, UNITS, RuleCheck, composed_wordings
from data_prep.readers.tables import ColumnMap, map_record, merged_columns
from persetrain.console import console, track
from persetrain.io import InputError, atomic_dir, iter_jsonl
from persetrain.prompts.parl import TASKS, judge_request
from persetrain.prompts.yes_no import YES_NO
from persetrain.saved import load_prepared

SPLITS = ("train", "validation")
#: The PARL dataset's split names, mapped to this dataset's.
_PARL_SPLITS = {"train": "train", "test": "validation"}
_LABEL_FIELDS = {"task": str, "input": str, "text": str, "rule": str, "satisfied": bool, "split": str}
#: our field -> the labels file's key (``--columns`` maps others)
LABEL_COLUMNS = {field: field for field in _LABEL_FIELDS}
#: the one table of ``prepare verifier``'s ``--labels`` (``--columns labels.FIELD=KEY``)
LABEL_TABLES = {"labels": LABEL_COLUMNS}


def _row(id: str, task: str, input: str, text: str, rule: str, satisfied: bool, **extra) -> dict:
    answer = YES_NO[0] if satisfied else YES_NO[1]
    prompt = [m.model_dump() for m in judge_request(task, input, text, rule).messages]
    return {
        "id": id,
        "task": task,
        "input": input,
        "text": text,
        "rule": rule,
        "label": answer,
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": answer}],
        **extra,
    }


def _texts(example: dict) -> Iterator[tuple[str, str, str]]:
    """``(kind, input, text)`` of every text of a PARL row: history items, the target, the negatives."""
    for k, (inp, out) in enumerate(zip(example["history_inputs"], example["history_outputs"], strict=True)):
        yield f"history-{k}", inp, out
    yield "target", example["target_input"], example["ground_truth"]
    for name, neg in zip(example["negative_names"], example["negatives"], strict=True):
        yield f"negative-{name}", example["target_input"], neg


def _edited(task: str, kind: str, text: str, rng: random.Random) -> Iterator[tuple[str, str, tuple[RuleCheck, ...]]]:
    """``(kind, text, rules to check)`` of each counterfactual copy of ``text``: one signature toggled, checked
    against every rule, or one signature in another of its forms, checked against that rule
    (``data_prep.parl.edits``)."""
    for check in RULES[task]:
        edited = check.edit(text, not check.check(text), rng)
        if check.check(edited) != check.check(text):
            yield f"{kind}:edit-{check.name}", edited, RULES[task]
    for check in RULES[task]:
        if check.forms is not None and check.check(text):
            for k, form in enumerate(check.forms(text)):
                yield f"{kind}:form-{check.name}-{k}", form, (check,)


def require_synthetic(parl_dir: Path, hint: str = "label other data and pass it with --labels") -> None:
    """Refuse a PARL dataset that is not the synthetic sample's: only there do the signature checkers know the truth.

    ``hint`` ends the message: what the caller's command takes instead.
    """
    info_path = parl_dir / "build_info.json"
    if not info_path.is_file():
        raise InputError(
            parl_dir, "not a prepared PARL dataset (no build_info.json); write it with persetrain prepare parl"
        )
    if not json.loads(info_path.read_text(encoding="utf-8")).get("synthetic"):
        raise InputError(
            info_path,
            f"field 'synthetic' is not true: signature checkers know only the synthetic sample users; {hint}",
        )


def signature_rows(
    parl_dir: Path, seed: int, counterfactuals: bool = False, extra: str = "", distractors: bool = False
) -> dict[str, list[dict]]:
    """Rows for every (text, signature rule) of a synthetic PARL dataset, split as the dataset is.

    With ``counterfactuals``, every train text also comes in edited copies, one per signature toggled, each
    checked against every rule like the original, and in the other forms of its class signatures, each
    checked against that rule (validation texts are never edited). ``extra`` names an extra dataset: all its
    users go to train, their ids and user ids prefixed with it (each sample numbers its users from 0). With
    ``distractors``, every original text is also checked against the distractor rules of its split, their "no"
    slots drawn from the words of the split's texts.
    """
    require_synthetic(parl_dir)
    rng = random.Random(f"{seed}:verifier:{extra}{parl_dir.name}")
    # The edits draw from their own generator: the wordings drawn for the original texts (validation's
    # included) are the same with and without counterfactuals.
    edit_rng = random.Random(f"{seed}:edits:{extra}{parl_dir.name}")
    distractor_rng = random.Random(f"{seed}:distractors:{extra}{parl_dir.name}")
    splits = dict.fromkeys(_PARL_SPLITS, "train") if extra else _PARL_SPLITS
    rows: dict[str, list[dict]] = {split: [] for split in SPLITS}
    dataset = load_prepared(parl_dir, "persetrain prepare parl")
    for parl_split, split in splits.items():
        texts = (text for ex in dataset[parl_split] for _, _, text in _texts(ex))
        vocabulary = sorted({w for text in texts for w in words(text)}) if distractors else []
        for example in track(dataset[parl_split], description=f"verifier rows {parl_dir.name}/{parl_split}"):
            task = example["task"]
            for kind, inp, text in _texts(example):
                texts = [(kind, text, rng, RULES[task])]
                if counterfactuals and split == "train":
                    texts += [
                        (edit_kind, edited, edit_rng, checks)
                        for edit_kind, edited, checks in _edited(task, kind, text, edit_rng)
                    ]
                for text_kind, judged, draw, checks in texts:
                    for check in checks:
                        row_id = f"{extra}{example['id']}:{text_kind}:{check.name}"
                        wordings = check.wordings + composed_wordings(task, check)
                        pool = range(TRAIN_WORDINGS) if split == "train" else range(TRAIN_WORDINGS, len(check.wordings))
                        wording = draw.choice(pool)
                        if split == "train":
                            # A composed wording in place of the hand-written one, drawn per row so that no other
                            # draw moves: validation's wordings and every text stay as they were without them.
                            composed = range(len(check.wordings), len(wordings))
                            wording = random.Random(f"{seed}:composed:{row_id}").choice([wording, *composed])
                        rows[split].append(
                            _row(
                                row_id,
                                task,
                                inp,
                                judged,
                                wordings[wording],
                                check.check(judged),
                                user_id=f"{extra}{example['user_id']}",
                                rule_name=check.name,
                                wording=wording,
                                text_kind=text_kind,
                            )
                        )
                if not distractors:
                    continue
                for name, wording, check in distractor_checks(text, UNITS[task], split, vocabulary, distractor_rng):
                    rows[split].append(
                        _row(
                            f"{extra}{example['id']}:{kind}:distractor-{name}:{'yes' if check.satisfied else 'no'}",
                            task,
                            inp,
                            check.text,
                            check.rule,
                            check.satisfied,
                            user_id=f"{extra}{example['user_id']}",
                            rule_name=f"{RULE_PREFIX}{name}",
                            wording=wording,
                            text_kind=kind,
                        )
                    )
    return rows


def label_rows(path: Path, columns: ColumnMap | None = None) -> dict[str, list[dict]]:
    """Rows from a JSON-lines file of labelled checks (module docstring), each field checked; ``columns`` maps our
    fields to the file's keys (:data:`LABEL_COLUMNS`), and errors name the file's key."""
    keys = merged_columns(LABEL_COLUMNS, columns)
    rows: dict[str, list[dict]] = {split: [] for split in SPLITS}
    for line, raw in iter_jsonl(path):
        record = map_record(raw, keys, list(keys), path, line)
        for field, kind in _LABEL_FIELDS.items():
            if not isinstance(record[field], kind):
                raise InputError(path, f"not a {kind.__name__}", record=line, field=keys[field])
        for field in ("text", "rule"):  # a blank text or rule gives a check whose answer means nothing
            if not record[field].strip():
                raise InputError(path, "empty: a labelled check needs it", record=line, field=keys[field])
        if record["task"] not in TASKS:
            raise InputError(
                path, f"unknown task {record['task']!r}; expected one of {TASKS}", record=line, field=keys["task"]
            )
        if record["split"] not in SPLITS:
            raise InputError(path, f"expected one of {SPLITS}", record=line, field=keys["split"])
        fields = {k: record[k] for k in ("task", "input", "text", "rule", "satisfied")}
        rows[record["split"]].append(
            _row(f"{path.stem}:{line}", **fields, user_id="", rule_name="", wording=-1, text_kind="labelled")
        )
    return rows


def _check_label_files(paths: Sequence[Path]) -> None:
    """Refuse a labels file given twice, or two that share a name: a labelled row's id is ``<file name>:<line>``,
    so that the row (and the judge item ``prepare verdict`` makes of it) names the line it came from, and two rows with
    one id are taken for one question downstream. Renaming a file keeps ids that say where a row came from; numbering
    the files instead would make every id depend on the order of ``--labels``."""
    seen: dict[str, Path] = {}
    for path in paths:
        if path.stem in seen:
            same = path.resolve() == seen[path.stem].resolve()
            raise InputError(
                path,
                "given twice in --labels"
                if same
                else f"its rows would have the ids of {seen[path.stem]}'s: a labelled row is named <file name "
                f"without suffix>:<line> ({path.stem}:1, ...), so two files of one name give two rows one id; "
                "rename one",
            )
        seen[path.stem] = path


def balance(rows: Sequence[dict], seed: int) -> list[dict]:
    """Per rule (its name, or its text for labelled rows), the majority answer subsampled to the minority's count."""
    by_rule: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_rule[row["rule_name"] or row["rule"]][row["label"]].append(row)
    rng = random.Random(f"{seed}:balance")
    kept = []
    # distractor rules last: the signature rules' draws are the same with and without them
    for rule in sorted(by_rule, key=lambda rule: (rule.startswith(RULE_PREFIX), rule)):
        yes, no = by_rule[rule][YES_NO[0]], by_rule[rule][YES_NO[1]]
        n = min(len(yes), len(no))
        kept += rng.sample(yes, n) + rng.sample(no, n)
    order = {row["id"]: k for k, row in enumerate(rows)}
    return sorted(kept, key=lambda row: order[row["id"]])


def _card(info: dict) -> str:
    counts = "\n".join(
        f"| {split} | {info['before'][split]['yes']} | {info['before'][split]['no']} | {info['splits'][split]} |"
        for split in SPLITS
    )
    intro = [
        "Task kind `verifier_sft`: TRL SFTTrainer's conversational prompt-completion format (`persetrain sft` "
        "reads it). Each row asks PARL's judge prompt (`persetrain.prompts.parl.judge_request`) whether a text "
        "satisfies a rule; the completion is `yes` or `no`. Built by `persetrain prepare verifier` "
        "(`data_prep/parl/rule_verifier.py`).\n"
    ]
    if info["synthetic"]:
        intro.append(
            synthetic_note(
                "Texts are the synthetic PARL sample users' (`data_prep.synthetic.parl`); labels come from the "
                "checkers of their planted signatures (`data_prep.parl.signatures`)."
            )
        )
    return render_card(
        "PARL rule verifier data",
        tags=("parl", "verifier"),
        license=License.from_info(info),
        synthetic=info["synthetic"],
        intro=intro,
        sections=[
            (
                "Sources",
                "\n".join(f"- `{s}`" for s in info["sources"])
                + "".join(f"\n- `{s}` (every user to train)" for s in info["extra_parl"]),
            ),
            (
                "Splits and balance",
                info["split_rule"] + " Per split and rule the majority answer is subsampled to the minority's count.\n"
                "\n| split | yes before | no before | rows kept (balanced) |\n|---|---:|---:|---:|\n" + counts,
            ),
            (
                "Columns",
                "`id`, `task`, `input` (the task input), `text` (the text judged), `rule`, `label` (`yes`/`no`), "
                "`prompt` (system + user messages), `completion`, `user_id`, "
                "`rule_name` (the signature; empty for labelled rows), `wording` (index of the rule's wording: its "
                "hand-written ones first, then its composed ones; -1 for labelled rows), `text_kind` (`history-<k>`, "
                "`target`, `negative-<generator>` or `labelled`).",
            ),
        ],
    )


def prepare_verifier(
    out: str | Path,
    parl: Sequence[str | Path] = (),
    labels: Sequence[str | Path] = (),
    seed: int = 0,
    counterfactuals: bool = False,
    extra_parl: Sequence[str | Path] = (),
    rules: Sequence[str] = (),
    distractors: bool = False,
    label_columns: ColumnMap | None = None,
) -> dict[str, int]:
    """Build the verifier dataset at ``out`` (train / validation, balanced) with its card; return the sizes.

    ``counterfactuals``: add edited copies of the synthetic train texts (:func:`signature_rows`); ``extra_parl``:
    more synthetic PARL datasets, every user of them trained on; ``rules``: keep these signature rules' checks
    only; ``distractors``: add the distractor rules' checks (module docstring); ``label_columns``: the ``labels``
    files' keys for our fields (``--columns``)."""
    from datasets import Dataset, DatasetDict

    if not (parl or labels):
        raise ValueError("no source: give --parl (a prepared synthetic PARL dataset) and/or --labels FILE.jsonl")
    if rules and labels:
        raise ValueError("--rules keeps signature rules' checks; labelled rows (--labels) name no signature")
    known = sorted({check.name for checks in RULES.values() for check in checks})
    if unknown := sorted(set(rules) - set(known)):
        raise ValueError(f"--rules: unknown signature rule(s) {unknown}; the rules are {known}")
    _check_label_files([Path(p) for p in labels])
    reads = [signature_rows(Path(p), seed, counterfactuals, distractors=distractors) for p in parl]
    reads += [label_rows(Path(p), label_columns) for p in labels]
    reads += [
        signature_rows(Path(p), seed, counterfactuals, extra=f"extra{k}:", distractors=distractors)
        for k, p in enumerate(extra_parl)
    ]
    rows = {split: [row for read in reads for row in read[split]] for split in SPLITS}
    kept = set(rules) or {row["rule_name"] for split in SPLITS for row in rows[split]}
    before = {split: dict(Counter(r["label"] for r in rows[split] if r["rule_name"] in kept)) for split in SPLITS}
    rows = {split: [r for r in balance(rows[split], seed) if r["rule_name"] in kept] for split in SPLITS}
    out = Path(out)
    for split in SPLITS:
        if not rows[split]:
            raise InputError(
                out, f"the {split} split would be empty after balancing yes/no; the sources need both answers"
            )
    info = {
        "name": "parl-verifier",
        "task": "verifier_sft",
        "synthetic": bool(parl),
        # The PARL datasets a verifier dataset reads are the SYNTHETIC sample's (require_synthetic); labels are the
        # user's own.
        **combine([SYNTHETIC] * bool(parl) + [source_terms(f"the labelled rows of {p}") for p in labels]).info(),
        "sources": [str(p) for p in (*parl, *labels)],
        "extra_parl": [str(p) for p in extra_parl],
        "seed": seed,
        "train_wordings": TRAIN_WORDINGS,
        "counterfactuals": counterfactuals,
        "distractors": distractors,
        "rules": sorted(rules),
        "before": {split: {a: before[split].get(a, 0) for a in YES_NO} for split in SPLITS},
        "splits": {split: len(r) for split, r in rows.items()},
        "split_rule": "PARL datasets: the PARL dataset's train users -> train, its test users -> validation; train "
        f"rows use a rule's first {TRAIN_WORDINGS} hand-written wordings or its composed ones (its phrases in rubric "
        "frames every rule shares), validation rows its other hand-written wordings"
        + (
            "; every train text also in edited copies, one signature toggled in each, and in the other forms of "
            "its pet word or opener"
            if counterfactuals
            else ""
        )
        + (
            "; every original text also checked against distractor rules (generic slotted properties, one yes and "
            "one no check each): train ones in their train wordings, validation also in others and held-out ones"
            if distractors
            else ""
        )
        + (f"; every user of {len(extra_parl)} extra synthetic dataset(s) -> train" if extra_parl else "")
        + (f"; the checks of the rules {', '.join(sorted(rules))} only, kept after balancing" if rules else "")
        + ". Labelled rows: their `split` field.",
    }
    with atomic_dir(out) as tmp:
        DatasetDict({split: Dataset.from_list(r) for split, r in rows.items()}).save_to_disk(
            str(tmp), num_shards=dict.fromkeys(SPLITS, 1)
        )
        write_card(tmp, info, _card(info))
    console.print(f"[green]wrote[/green] verifier data -> {out} {info['splits']}")
    return info["splits"]
