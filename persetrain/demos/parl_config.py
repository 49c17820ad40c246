"""What one run of ``persetrain demo parl`` takes: where and on what it runs, and its research knobs.

The knobs' values per form, and why each has the value it has, are in ``parl.yaml`` beside this module (shipped in
the package): ``full`` is the measurement, ``short`` (the default) changes a few of them to end within 15 minutes.
The command line chooses the form (``--full``) and may give a YAML file of knobs of its own (``--config FILE``)
that applies over it; so the command stays short while every knob stays settable.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from persetrain.io import InputError, first_error
from persetrain.models import DEFAULT_MODEL

FORMS_FILE = Path(__file__).with_name("parl.yaml")
FORMS = ("short", "full")
#: Each form's knobs, as ``parl.yaml`` gives them (``short``: only what differs from ``full``).
FORM_KNOBS: dict[str, dict] = yaml.safe_load(FORMS_FILE.read_text(encoding="utf-8"))
#: The full form's verifier curriculum (``benchmarks/parl_grpo.py`` starts from it).
JUDGE_CURRICULUM: str = FORM_KNOBS["full"]["judge_curriculum"]
Curriculum = tuple[tuple[tuple[str, ...], int], ...]


def parse_curriculum(text: str) -> Curriculum:
    """``"colon+lowercase:300,all:600"`` -> ``((("colon", "lowercase"), 300), ((), 600))``: rules joined by ``+``
    (``all``: every rule), then the stage's steps."""
    stages = []
    for part in text.split(","):
        rules, _, steps = part.strip().rpartition(":")
        if not rules or not steps.isdigit():
            raise ValueError(f"stage {part.strip()!r} is not RULE[+RULE...]:STEPS or all:STEPS")
        stages.append(((() if rules == "all" else tuple(rules.split("+"))), int(steps)))
    return tuple(stages)


def format_curriculum(stages: Curriculum) -> str:
    """The inverse of :func:`parse_curriculum`."""
    return ",".join(f"{'+'.join(rules) or 'all'}:{steps}" for rules, steps in stages)


class ParlDemoConfig(BaseModel):
    """One run of the demo. The knobs (every field from ``judge_curriculum`` on) have no defaults here: each form
    gives them all (``parl.yaml``, which says what each means); build a config with :func:`demo_config`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    out: Path = Path("runs/demo-parl")
    model: str = DEFAULT_MODEL
    seed: int = 0
    #: A trained rule verifier to judge with, or several joined by commas; None trains one (stage 0).
    judge: str | None = None
    #: Start from an empty ``out`` instead of skipping the stages ``summary.json`` records.
    fresh: bool = False
    #: ``full`` or ``short``: what the report says ran.
    form: str = "full"
    judge_curriculum: Curriculum
    judge_distractors: bool
    judge_seeds: int
    judge_train_rows: int | None
    warmstart: str
    warmstart_users: int | None
    warmstart_samples: int
    warmstart_copies: int
    grpo_steps: int
    grpo_prompts: int
    user_negatives: int
    heldout_users: int | None
    runs: int
    max_new_tokens: int

    @field_validator("judge_curriculum", mode="before")
    @classmethod
    def _parsed(cls, value: object) -> object:
        return parse_curriculum(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> ParlDemoConfig:
        from persetrain.train.warmstart import SOURCES

        if self.warmstart not in SOURCES:
            raise ValueError(f"warmstart is one of {SOURCES}, not {self.warmstart!r}")
        if self.grpo_prompts < 1:
            raise ValueError(f"grpo_prompts is at least 1, not {self.grpo_prompts}")
        if self.judge_seeds < 1:
            raise ValueError(f"judge_seeds is at least 1, not {self.judge_seeds}")
        if not self.judge_curriculum or any(steps < 1 for _, steps in self.judge_curriculum):
            raise ValueError(f"judge_curriculum needs stages of at least 1 step, not {self.judge_curriculum}")
        if self.warmstart_samples and self.warmstart != "truth":
            raise ValueError("warmstart_samples needs warmstart 'truth': only synthetic users' true rules are known")
        if self.form not in FORMS:
            raise ValueError(f"form is one of {FORMS}, not {self.form!r}")
        return self


#: The knobs a form or a ``--config`` file sets.
KNOBS = tuple(name for name in ParlDemoConfig.model_fields if name in FORM_KNOBS["full"])


def form_knobs(full: bool) -> dict:
    """The knobs of the full form, or of the short one (the full form's, changed where ``short`` says)."""
    return {**FORM_KNOBS["full"], **({} if full else FORM_KNOBS["short"])}


def read_knobs(path: Path) -> dict:
    """The knobs a ``--config`` file sets; a key that is not a knob is one line naming the file and the key."""
    from persetrain.config_files import read_yaml_mapping

    knobs = read_yaml_mapping(path, "demo config")
    unknown = [key for key in knobs if key not in KNOBS]
    if unknown:
        raise InputError(path, f"not a knob of the demo; the knobs are {', '.join(KNOBS)}", field=unknown[0])
    return knobs


def demo_config(full: bool = False, config: Path | None = None, **given: object) -> ParlDemoConfig:
    """The form's knobs, then those of the ``config`` file, then whatever ``given`` sets (None: not given).

    A value of the wrong kind is one line naming the field, and the file when it came from one."""
    knobs = read_knobs(config) if config is not None else {}
    values = {**form_knobs(full), **knobs, **{key: value for key, value in given.items() if value is not None}}
    try:
        return ParlDemoConfig(form="full" if full else "short", **values)
    except ValidationError as err:
        field, message = first_error(err)
        if config is not None and field in knobs:
            raise InputError(config, message, field=field) from None
        raise ValueError(f"{field}: {message}" if field else message) from None
