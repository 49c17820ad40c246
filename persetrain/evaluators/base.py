"""The evaluator interface every method implements, the ``@register`` decorator, and checks methods share.

Modelled on ``engine/base.py``: a method is one ``Evaluator`` subclass that turns examples into
judgments through the engine; the runner (``persetrain.evaluation``) owns what exists once for every
method - loading data, the engine and its cache, the run directory, metrics and the report. So adding
a method is one module here + its prompt templates + any new metric functions, and nothing in
``evaluation.py`` or ``cli/`` names a method.

Each evaluator has one config dataclass (TRL's one-config-per-trainer style). Its fields are what a
user can set, from ``persetrain evaluate --set FIELD=VALUE`` or from a YAML evaluation config, so the
dataclass - with a comment on every field - is the method's whole documented surface.

Looking an evaluator up by name needs every method imported, and every method imports this module, so
the lookup, and ``SystemSpec`` which builds a system by name, are ``evaluators.registry``'s.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import yaml

from persetrain.io import InputError
from persetrain.schema import Judgment, McqExample

if TYPE_CHECKING:
    from persetrain.engine import Engine
    from persetrain.tasks import TaskKind


@dataclass
class EvaluatorConfig:
    """Base of every evaluator's config; a method adds its own documented fields."""


@dataclass(frozen=True)
class FieldNeed:
    """A field that a method reads in every judged example of one task kind: ``problem(value)`` says what is wrong
    with a value in the method's words, or None when it does."""

    task: str
    field: str
    problem: Callable[[Any], str | None]


@dataclass(frozen=True)
class DataNeeds:
    """What an evaluator reads of a dataset beyond the judged examples' own records: other splits, and fields that
    must hold for the method. Declared on the class so that the runner checks every system's needs before any model
    loads or any system judges: a baseline that fits on ``train`` fails at once, not after the LLM systems ran."""

    #: Other splits of the dataset the evaluator reads, each with what it reads it for (MF: "fits its model on").
    splits: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fields: tuple[FieldNeed, ...] = ()


def _candidates_problem(options: Sequence[str]) -> str | None:
    if len(options) >= 2:
        return None
    return f"compares candidate answers, but this example has {len(options)}; give at least two"


def _reference_problem(reference: str) -> str | None:
    if reference.strip():
        return None
    return "compares outputs with the user's own text (the reference), and this example has none"


#: A question with fewer than two candidates leaves nothing to compare (PREF, mcq-letter, the learned judges...).
CANDIDATES = FieldNeed("mcq", "options", _candidates_problem)
#: A reference-task example without the user's own text leaves a reference-based method nothing to compare with.
REFERENCE = FieldNeed("reference", "reference", _reference_problem)


def check_fields(needs: Sequence[FieldNeed], task: str, examples: Sequence, who: str, data: Path) -> None:
    """Refuse the first example of kind ``task`` that breaks one of ``needs``, naming ``data``, the example and the
    field; ``who`` (the method or the system) starts the message."""
    for need in needs:
        if need.task != task:
            continue
        for ex in examples:
            problem = need.problem(getattr(ex, need.field))
            if problem:
                raise InputError(data, f"{who} {problem}", record=ex.id, field=need.field)


@dataclass
class JudgeContext:
    """What a judging call may need besides the examples, supplied by the runner.

    ``system`` is the name the judgments are written under: put it in ``Judgment.evaluator`` (or
    ``f"{system}-{suffix}"`` for a second output of the same call, which becomes its own system).
    """

    data: Path
    split: str
    system: str
    out: Path
    seed: int = 0
    #: The system's model spec, for evaluators that load their model themselves (``uses_engine = False``).
    model: str | None = None


class Evaluator(ABC):
    """A personalized evaluator: examples of a task kind in, judgments with rationales and cost out."""

    #: Registry key, set by :func:`register`.
    name: ClassVar[str]
    #: Task kinds this evaluator can judge ("scalar", "pairwise", "mcq", "reference", "rubric", ...).
    tasks: ClassVar[tuple[str, ...]]
    Config: ClassVar[type[EvaluatorConfig]] = EvaluatorConfig
    #: False for evaluators that compute without a language model (Reviewer Avg., MF, BLEU, ...).
    needs_model: ClassVar[bool] = True
    #: False for evaluators whose model the engine cannot run (a reward model is a sequence classifier,
    #: not a language model): they get no engine and load ``JudgeContext.model`` themselves.
    uses_engine: ClassVar[bool] = True
    #: Splits and fields it reads beyond the judged examples, checked by the runner before any model loads.
    needs: ClassVar[DataNeeds] = DataNeeds()
    #: How its prompt names a question's options: "letters" (A, B, ...), "numbers" (1, 2, ...), or None for a
    #: judge that sees each option alone. Judgment records give the chosen option's label in these terms.
    option_labels: ClassVar[Literal["letters", "numbers"] | None] = None

    def __init__(self, config: EvaluatorConfig | None = None):
        self.config = config if config is not None else self.Config()

    @abstractmethod
    def judge(self, examples: Sequence, engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        """One judgment per judged item, every rationale kept and its cost attached.

        Output that cannot be read after bounded retries becomes ``Judgment(parsed=False)``: kept and
        counted by the metrics, never dropped.
        """

    def check_model(self, model: str) -> None:  # noqa: B027 - optional hook, most evaluators take any model
        """Refuse a model of the wrong kind before anything loads (a reward model given to a yes/no verifier)."""

    def metrics(self, task: TaskKind, examples: Sequence, judgments: list[Judgment]) -> dict:
        """The task's metrics of one system; override to add numbers only this method has (e.g. Elo)."""
        return task.metrics(examples, judgments)

    def report(
        self, out: Path, examples: Sequence, judgments: Mapping[str, list[Judgment]], metrics: Mapping[str, dict]
    ) -> dict[str, str]:
        """Extra report sections (title -> markdown) for this evaluator's systems; none by default.

        ``judgments`` and ``metrics`` are keyed by system name; plots go into the run directory ``out``.
        """
        return {}


def refuse_single_answer(examples: Sequence[McqExample], method: str, data: Path) -> None:
    """Comparing candidates needs at least two; a one-answer list is a data error in ``data``, not a score.

    Every method that compares a question's candidates (PREF, mcq-letter, odd-one-out, the learned judges)
    checks this first, so it lives with the interface they share.
    """
    check_fields([CANDIDATES], "mcq", examples, method, data)


def refuse_unlettered(examples: Sequence[McqExample], method: str, letters: int) -> None:
    """A method that names options by letter can show at most ``letters`` of them."""
    too_many = [ex.id for ex in examples if len(ex.options) > letters]
    if too_many:
        raise ValueError(f"{method} labels at most {letters} options; examples {too_many[:5]} have more")


#: Filled by :func:`register`; read through ``evaluators.registry``, which imports every built-in method first.
REGISTRY: dict[str, type[Evaluator]] = {}


def register(name: str) -> Callable[[type[Evaluator]], type[Evaluator]]:
    """Class decorator: ``@register("pref")`` makes the evaluator available under that name."""

    def wrap(cls: type[Evaluator]) -> type[Evaluator]:
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise ValueError(f"evaluator {name!r} is registered twice ({REGISTRY[name].__module__}, {cls.__module__})")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return wrap


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Bring a value from the command line (a string) or YAML to a config field's declared type."""
    if isinstance(value, str) and hint is not str:
        value = yaml.safe_load(value) if value.strip() else value
    origin = typing.get_origin(hint)
    options = typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ValueError(f"{where}: may not be null")
    for option in options:
        base = typing.get_origin(option) or option
        if base is typing.Literal:
            if value in typing.get_args(option):
                return value
            continue
        if base is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if base is str and not isinstance(value, str):
            return str(value)
        if base in (tuple, list) and isinstance(value, list | tuple):
            return base(value)
        if isinstance(base, type) and isinstance(value, base):
            return value
    raise ValueError(f"{where}: {value!r} is not a valid {getattr(hint, '__name__', hint)}")


def make_config(cls: type[EvaluatorConfig], values: Mapping[str, Any], where: str) -> EvaluatorConfig:
    """A config from field values (strings from the CLI are parsed as YAML scalars), checked by name and type."""
    types_ = _field_types(cls)
    unknown = sorted(set(values) - set(types_))
    if unknown:
        raise ValueError(
            f"{where}: unknown option(s) {', '.join(unknown)}; {cls.__name__} has: {', '.join(types_) or 'no options'}"
        )
    return cls(**{k: _coerce(v, types_[k], f"{where}: option {k}") for k, v in values.items()})


def config_fields(cls: type[EvaluatorConfig]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}
