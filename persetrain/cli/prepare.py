"""``persetrain prepare`` and ``generate-baselines``: raw data into datasets (the work is in ``data_prep/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from persetrain.cli.common import BackendOpt, BaseUrlOpt, ModelOpt, app, make_engine, renamed_command
from persetrain.console import console
from persetrain.models import DEFAULT_MODEL

#: ``--columns`` of every command that reads raw files.
ColumnsOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="FIELD=COLUMN or TABLE.FIELD=COLUMN: read our FIELD from the file's COLUMN (repeatable; fields and "
        "tables in data_prep/README.md)."
    ),
]

prepare_app = typer.Typer(help="Turn raw data into instruction datasets.", no_args_is_help=True)
app.add_typer(prepare_app, name="prepare")


@prepare_app.command("sample")
def prepare_sample(
    out: Annotated[Path, typer.Option(help="Folder for the raw files.")],
    seed: int = 0,
) -> None:
    """Write SYNTHETIC raw MPST / DOC / Amazon files with planted reviewer preferences, and PARL users
    with planted writing signatures (``OUT/parl``)."""
    from data_prep.synthetic.parl import write_parl_sample
    from data_prep.synthetic.perse import write_sample_data

    write_sample_data(out, seed=seed)
    write_parl_sample(out / "parl", seed=seed)
    console.print(f"wrote synthetic raw data to {out}")


@prepare_app.command("perse")
def prepare_perse_cmd(
    raw: Annotated[Path, typer.Option(help="Raw data folder (see data_prep/README.md).")],
    out: Annotated[Path, typer.Option(help="Output folder for the datasets.")],
    model: ModelOpt = DEFAULT_MODEL,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    no_llm: Annotated[bool, typer.Option(help="Skip anonymization/summarization (raw synopses).")] = False,
    k: Annotated[list[int] | None, typer.Option(help="Profile size K (repeatable); default 3.")] = None,
    seed: int = 0,
    probe: Annotated[bool, typer.Option(help="Run the title contamination probe.")] = True,
    columns: ColumnsOpt = None,
    k_core: Annotated[
        int, typer.Option(min=1, help="Amazon: keep reviews whose customer and book have at least N reviews.")
    ] = 5,
) -> None:
    """Anonymize + summarize plots with an LLM, probe contamination, build Per-MPST / Per-DOC / Amazon (its 2018 or
    2023 dump, each told by its own columns)."""
    from data_prep.perse.prepare import PERSE_TABLES, prepare_perse
    from data_prep.readers.tables import parse_columns

    mapped = parse_columns(columns or [], PERSE_TABLES)
    engine = None if no_llm else make_engine(model, backend, base_url, out / "engine-cache.sqlite")
    prepare_perse(
        raw,
        out,
        engine=engine,
        ks=tuple(k or (3,)),
        seed=seed,
        probe=probe,
        mpst_plot_columns=mapped.get("mpst_plots"),
        mpst_review_columns=mapped.get("mpst_reviews"),
        doc_columns=mapped.get("doc"),
        amazon_columns=mapped,
        k_core=k_core,
    )


@prepare_app.command("parl")
def prepare_parl_cmd(
    raw: Annotated[Path, typer.Option(help="Folder with amazon/, reddit/, news/ in the PARL layouts.")],
    out: Annotated[Path, typer.Option(help="Output folder: one dataset per task, parl_<task>/.")],
    task: Annotated[list[str] | None, typer.Option(help="amazon, reddit or news (repeatable); default all.")] = None,
    baselines: Annotated[
        list[Path] | None,
        typer.Option(help="Negatives file from generate-baselines (repeatable); default RAW/<task>/baselines.jsonl."),
    ] = None,
    min_history: Annotated[int, typer.Option(help="Users with fewer earlier items are an error.")] = 1,
    user_negatives: Annotated[
        int,
        typer.Option(
            help="Also give every row this many other users' own texts (same split) as negatives of the reward: "
            "a rubric set must tell the user from other users, not only from the generators."
        ),
    ] = 0,
    seed: int = 0,
    columns: ColumnsOpt = None,
) -> None:
    """Build PARL rubric-induction datasets (GRPO prompts + reward columns) and verl parquet files."""
    from data_prep.parl.prepare import prepare_parl
    from data_prep.parl.readers import PARL_TABLES
    from data_prep.readers.tables import parse_columns

    written = prepare_parl(
        raw,
        out,
        tasks=tuple(task or ("amazon", "reddit", "news")),
        baselines=tuple(baselines or ()),
        seed=seed,
        min_history=min_history,
        user_negatives=user_negatives,
        columns=parse_columns(columns or [], PARL_TABLES),
    )
    for name, sizes in written.items():
        console.print(f"[green]wrote[/green] parl_{name} -> {out / f'parl_{name}'} {sizes}")


@prepare_app.command("reference")
def prepare_reference_cmd(
    raw: Annotated[Path, typer.Option(help="A task folder in its PARL layout (e.g. RAW/parl/amazon).")],
    task: Annotated[str, typer.Option(help="amazon, reddit or news.")],
    baselines: Annotated[
        list[Path],
        typer.Option(
            help="Outputs of other generators: a generate-baselines file (repeatable) or the sample's baselines.jsonl."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Folder for test.jsonl + dataset.json (task kind reference).")],
    min_history: int = 1,
    synthetic: Annotated[bool, typer.Option(help="Mark the card as synthetic data.")] = False,
    columns: ColumnsOpt = None,
) -> None:
    """Build a reference-task dataset (ExPerT, AuPEL): the user's own text as reference and system 'gold',
    earlier texts as writing samples, and every generator's output."""
    from data_prep.parl.readers import PARL_TABLES
    from data_prep.parl.reference import build_reference
    from data_prep.readers.tables import parse_columns

    mapped = parse_columns(columns or [], PARL_TABLES)
    build_reference(raw, task, baselines, out, min_history=min_history, synthetic=synthetic, columns=mapped)
    console.print(f"[green]wrote[/green] reference dataset -> {out}")


@prepare_app.command("verifier")
def prepare_verifier_cmd(
    out: Annotated[Path, typer.Option(help="Output folder: the verifier dataset (train / validation).")],
    parl: Annotated[
        list[Path] | None,
        typer.Option(help="A prepared SYNTHETIC PARL dataset (parl_<task>); labels from its signature checkers."),
    ] = None,
    labels: Annotated[
        list[Path] | None,
        typer.Option(help="JSON lines of labelled checks: task, input, text, rule, satisfied, split (repeatable)."),
    ] = None,
    counterfactuals: Annotated[
        bool,
        typer.Option(
            help="Also train on edited copies of the synthetic train texts, one signature toggled in each, and on "
            "the other forms of a class signature (pet word, opener)."
        ),
    ] = False,
    extra_parl: Annotated[
        list[Path] | None,
        typer.Option(
            help="Another prepared SYNTHETIC PARL dataset (another sample seed: new users), every user of it trained "
            "on, none validated (repeatable)."
        ),
    ] = None,
    rules: Annotated[
        list[str] | None,
        typer.Option(
            help="Keep only this signature rule's checks, e.g. colon (repeatable): a stage of a rule curriculum."
        ),
    ] = None,
    distractors: Annotated[
        bool,
        typer.Option(
            help="Also check every original text against distractor rules: generic properties no user plants "
            '("opens with the word \'X\'", "all capital letters"), one yes and one no check each.'
        ),
    ] = False,
    seed: int = 0,
    columns: ColumnsOpt = None,
) -> None:
    """Labelled (rule, text, satisfied) rows in PARL's judge prompt, for `persetrain sft` to train the judge."""
    from data_prep.parl.rule_verifier import LABEL_TABLES, prepare_verifier
    from data_prep.readers.tables import parse_columns

    prepare_verifier(
        out,
        parl=parl or [],
        labels=labels or [],
        seed=seed,
        counterfactuals=counterfactuals,
        extra_parl=extra_parl or [],
        rules=rules or [],
        distractors=distractors,
        label_columns=parse_columns(columns or [], LABEL_TABLES).get("labels"),
    )


#: Options `prepare preference` and `prepare verdict` share.
PrefevalOpt = Annotated[list[Path] | None, typer.Option(help="A PrefEval folder (mcq_options/*.json) (repeatable).")]
HoldoutTopicsOpt = Annotated[
    str,
    typer.Option(help="Comma-separated PrefEval topics for the validation split; default none (every topic in train)."),
]
PerseOpt = Annotated[
    list[Path] | None,
    typer.Option(help="A scalar dataset `prepare perse` wrote, e.g. OUT/per_mpst_k3 (repeatable)."),
]
MaxPairsOpt = Annotated[int | None, typer.Option(help="At most N pairs per PerSE reviewer (seeded); default all.")]


@prepare_app.command("preference")
def prepare_preference_cmd(
    out: Annotated[Path, typer.Option(help="Folder for the datasets listwise/, pairs/ and verifier/.")],
    prefeval: PrefevalOpt = None,
    holdout_topics: HoldoutTopicsOpt = "",
    perse: PerseOpt = None,
    reference: Annotated[
        list[Path] | None, typer.Option(help="A dataset `prepare reference` or `prepare parl` wrote (repeatable).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the option order and the PerSE profiles.")] = 0,
    profile_items: Annotated[int, typer.Option(help="Earlier items that show a PerSE reviewer or a user.")] = 3,
    profile_words: Annotated[int, typer.Option(help="Words kept of each profile item.")] = 40,
    max_pairs_per_person: MaxPairsOpt = None,
    columns: ColumnsOpt = None,
) -> None:
    """Preference data for reward models and yes/no verifiers: listwise (mcq), pairs (TRL RewardTrainer) and
    verifier (SFT) datasets, train / validation, from PrefEval, PerSE and reference data."""
    from data_prep.preference.prepare import prepare_preference
    from data_prep.readers.prefeval import PREFEVAL_TABLES
    from data_prep.readers.tables import parse_columns

    topics = [t.strip() for t in holdout_topics.split(",") if t.strip()]
    prepare_preference(
        out,
        prefeval=prefeval or (),
        perse=perse or (),
        reference=reference or (),
        holdout_topics=topics,
        seed=seed,
        profile_items=profile_items,
        profile_words=profile_words,
        max_pairs_per_person=max_pairs_per_person,
        prefeval_columns=parse_columns(columns or [], PREFEVAL_TABLES).get("prefeval"),
    )


@prepare_app.command("verdict")
def prepare_verdict_cmd(
    out: Annotated[Path, typer.Option(help="Folder for the verdict judge dataset (train / validation).")],
    prefeval: PrefevalOpt = None,
    holdout_topics: HoldoutTopicsOpt = "",
    perse: PerseOpt = None,
    verifier: Annotated[
        list[Path] | None,
        typer.Option(
            help="A yes / no dataset `prepare verifier` wrote, or the verifier/ view of `prepare preference` (one "
            "question's candidates one item), its train / validation kept (repeatable)."
        ),
    ] = None,
    balance_yes_no: Annotated[
        bool, typer.Option(help="Keep as many 'no' candidates of a verifier question as 'yes' ones (seeded).")
    ] = False,
    swap_persons: Annotated[
        bool,
        typer.Option(
            help="Also show each verifier question's 'yes' candidate to another user of its split (the same topic "
            "first), gold 'no': one more 'no' candidate (--balance-yes-no draws it as often as the others), a row "
            "only a judge that reads the person gets right."
        ),
    ] = False,
    mode: Annotated[
        str, typer.Option(help="verdict (the verdict alone: mcq-letter's prompt) or think (a rationale, then it).")
    ] = "verdict",
    orders: Annotated[
        int, typer.Option(help="Orders of the options per question, adjacent rows (verdict-consistent compares them).")
    ] = 2,
    seed: Annotated[int, typer.Option(help="Seeds the option orders, the PerSE profiles and the row order.")] = 0,
    profile_items: Annotated[int, typer.Option(help="Earlier items that show a PerSE reviewer.")] = 3,
    profile_words: Annotated[int, typer.Option(help="Words kept of each profile item.")] = 40,
    max_pairs_per_person: MaxPairsOpt = None,
    columns: ColumnsOpt = None,
) -> None:
    """Verdict prompts with their gold verdict for a judge trained by GRPO on its own verdicts (`persetrain grpo`
    with the verdict-* rewards), train / validation, from PrefEval, PerSE and verifier data."""
    from data_prep.readers.prefeval import PREFEVAL_TABLES
    from data_prep.readers.tables import parse_columns
    from data_prep.verdict.prepare import prepare_verdict

    topics = [t.strip() for t in holdout_topics.split(",") if t.strip()]
    prepare_verdict(
        out,
        prefeval=prefeval or (),
        perse=perse or (),
        verifier=verifier or (),
        holdout_topics=topics,
        seed=seed,
        mode=mode,
        orders=orders,
        profile_items=profile_items,
        profile_words=profile_words,
        max_pairs_per_person=max_pairs_per_person,
        balance_yes_no=balance_yes_no,
        swap_persons=swap_persons,
        prefeval_columns=parse_columns(columns or [], PREFEVAL_TABLES).get("prefeval"),
    )


@prepare_app.command("verdict-sft")
def prepare_verdict_sft_cmd(
    data: Annotated[Path, typer.Option(help="A verdict-mode dataset `prepare verdict` wrote.")],
    out: Annotated[Path, typer.Option(help="Folder for the SFT dataset (its splits kept).")],
) -> None:
    """The judge rows as SFT prompt-completion rows, the gold verdict as the completion (`persetrain sft`): the
    GRPO judge's supervised starting point and the ceiling to read it against."""
    from data_prep.verdict.sft_view import verdict_sft

    verdict_sft(data, out)


renamed_command(prepare_app, "prepare", "judge", "verdict")
renamed_command(prepare_app, "prepare", "judge-sft", "verdict-sft")


@app.command("generate-baselines")
def generate_baselines_cmd(
    raw: Annotated[Path, typer.Option(help="A task folder in its PARL layout (e.g. RAW/parl/amazon).")],
    task: Annotated[str, typer.Option(help="amazon, reddit or news.")],
    generator: Annotated[list[str], typer.Option(help="NAME=KIND:MODEL or KIND:MODEL, KIND non or rag (repeatable).")],
    out: Annotated[Path, typer.Option(help="Folder for <NAME>.jsonl per generator (resumable).")],
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Default: per task (160 / 200 / 32).")] = None,
    min_history: int = 1,
    seed: int = 0,
    columns: ColumnsOpt = None,
) -> None:
    """Write competitive generators' outputs for every PARL task input: the negatives of `prepare parl`."""
    from data_prep.parl.baselines import GeneratorSpec, generate_baselines
    from data_prep.parl.readers import PARL_TABLES, read_task
    from data_prep.readers.tables import parse_columns

    specs = [GeneratorSpec.parse(g) for g in generator]
    mapped = parse_columns(columns or [], PARL_TABLES)
    examples = read_task(raw, task, min_history=min_history, columns=mapped)
    written = generate_baselines(
        examples,
        specs,
        out,
        lambda spec: make_engine(spec, backend, base_url, out / "engine-cache.sqlite"),
        seed=seed,
        max_new_tokens=max_new_tokens,
    )
    for name, path in written.items():
        console.print(f"[green]wrote[/green] {name} -> {path}")
