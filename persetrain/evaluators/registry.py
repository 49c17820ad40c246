"""The built-in evaluators looked up by name, and ``SystemSpec``: a system named on the command line, built.

Importing this module imports every evaluator module, so each one's ``@register`` has run before a name
is looked up. It sits above the methods (they import ``evaluators.base``, never this), which is what
keeps the registry out of an import circle with them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from persetrain.evaluators import (  # noqa: F401 - imported so that their @register runs
    aupel,
    baselines,
    expert,
    lexical,
    llm_judge,
    mcq_letter,
    odd_one_out,
    parl,
    perse,
    pref,
    rm,
    verdict,
    verifier,
)
from persetrain.evaluators.base import REGISTRY, Evaluator, make_config


def registered() -> dict[str, type[Evaluator]]:
    """Every registered evaluator by name: the built-in ones and any registered since."""
    return dict(sorted(REGISTRY.items()))


def get_evaluator(name: str) -> type[Evaluator]:
    known = registered()
    if name not in known:
        raise ValueError(f"unknown evaluator {name!r}; registered evaluators: {', '.join(known)}")
    return known[name]


def evaluators_for(task: str) -> list[str]:
    """Names of the registered evaluators that can judge a task kind."""
    return [name for name, cls in registered().items() if task in cls.tasks]


@dataclass
class SystemSpec:
    """One system to evaluate: a registered evaluator, the model it runs on (if any), and its options."""

    name: str
    evaluator: str
    model: str | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> SystemSpec:
        """``EVALUATOR`` | ``EVALUATOR:MODEL`` | ``NAME=EVALUATOR`` | ``NAME=EVALUATOR:MODEL``.

        The name defaults to the model (so two models of one evaluator do not collide) or, for an
        evaluator without a model, to the evaluator. Model specs may hold ':' (``embedded:NAME``).
        """
        head = text.split(":", 1)[0]
        name, _, rest = text.partition("=") if "=" in head else ("", "", text)
        evaluator, _, model = rest.partition(":")
        if not evaluator:
            raise ValueError(f"system {text!r}: use EVALUATOR, EVALUATOR:MODEL or NAME=EVALUATOR:MODEL")
        return cls(name or model or evaluator, evaluator, model or None)

    def build(self) -> Evaluator:
        """The configured evaluator; checks the name, the options and that a model is given when needed."""
        evaluator = get_evaluator(self.evaluator)
        where = f"system {self.name!r} ({self.evaluator})"
        if evaluator.needs_model and not self.model:
            raise ValueError(f"{where} needs a model: {self.name}={self.evaluator}:MODEL")
        if not evaluator.needs_model and self.model:
            raise ValueError(f"{where} uses no model, but {self.model!r} was given")
        return evaluator(make_config(evaluator.Config, self.options, where))
