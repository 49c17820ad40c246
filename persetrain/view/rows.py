"""The examples of one or more runs as the rows ``persetrain view`` pages through, and the filters over them.

A row is one example (joined across runs by its id, so runs on the same data sit side by side): the person,
the request, the candidates with the gold marked, and per run per system its records. The flags a filter
reads (wrong, systems disagree, flipped by a probe) and the text a search matches are computed once, when the
runs are read, so a page of a 10,000-example run is a list comprehension, not a pass over its files. The
export embeds the same rows and ``static/app.js`` applies the same filters in the browser
(``filter_rows`` there mirrors :func:`matches` here).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from persetrain.person import PERSON_FIELDS
from persetrain.records import candidate_keys, candidate_label, gold_of
from persetrain.schema import reviewer_of
from persetrain.view.runs import Run

#: Fields that name the candidates of an example, by the shape of its record.
PAIR_FIELDS = (("plot_a", "plot_b"), ("response_a", "response_b"))
#: Fields shown as the example's topic, first found wins (PrefEval's topic, Per-DOC's aspect, PARL's task).
TOPIC_FIELDS = ("topic", "aspect", "task")


def _candidates(ex: BaseModel, data: dict) -> list[dict]:
    """Each candidate the judges compared or scored: its key (what records' ``target``/``choice`` name), text."""
    if isinstance(data.get("options"), list):
        return [{"key": k, "label": str(k + 1), "text": t} for k, t in enumerate(data.pop("options"))]
    for a, b in PAIR_FIELDS:
        if a in data and b in data:
            return [{"key": 0, "label": "A", "text": data.pop(a)}, {"key": 1, "label": "B", "text": data.pop(b)}]
    if isinstance(data.get("outputs"), dict):  # reference: one text per generator system
        return [{"key": name, "label": name, "text": text} for name, text in data.pop("outputs").items()]
    if "history" in data and "output" in data:  # rubric: the user's own text and competitors'
        own = [{"key": "gt", "label": "the user's own", "text": data.pop("output")}]
        return own + [{"key": n, "label": n, "text": t} for n, t in (data.pop("baselines", None) or {}).items()]
    if "query_plot" in data:
        return [{"key": None, "label": "query plot", "text": data.pop("query_plot")}]
    return []


def topic_of(ex: BaseModel) -> str:
    return next((v for f in TOPIC_FIELDS if isinstance(v := getattr(ex, f, None), str) and v), "")


def whose(ex: BaseModel) -> str:
    try:
        return reviewer_of(ex)
    except ValueError:
        return ""


def example_view(ex: BaseModel) -> dict:
    """An example as the page shows it: person, request fields, candidates, gold, topic, whose it is."""
    data = ex.model_dump(mode="json")
    person_field = PERSON_FIELDS.get(type(ex))
    person = data.pop(person_field, None) if person_field else None
    candidates = _candidates(ex, data)
    gold = gold_of(ex)
    keys = candidate_keys(ex)
    for key in ("gold", "preferred"):
        data.pop(key, None)
    return {
        "id": data.pop("id"),
        "person_field": person_field,
        "person": person,
        "fields": {k: v for k, v in data.items() if v not in ("", None, [], {}) and k not in TOPIC_FIELDS},
        "candidates": candidates,
        "gold": gold,
        "gold_label": candidate_label(ex, gold, None) if keys and isinstance(gold, int) else None,
        "topic": topic_of(ex),
        "whose": whose(ex),
    }


@dataclass
class Row:
    """One example with every run's records of it and the flags the filters read. Its view and the text a search
    reads are built when first asked for: the first page of a large run builds twenty, not every one."""

    example: BaseModel
    topic: str
    whose: str
    #: one entry per run: system -> its plain records of this example (several for per-target judgments).
    runs: list[dict[str, list[dict]]]
    #: systems (as "run/system") that got it wrong, whose verdict a probe changed, that judged it.
    wrong: frozenset[str]
    flipped: frozenset[str]
    judged_by: frozenset[str]
    disagree: bool
    _view: dict | None = None
    _search: str | None = None

    @property
    def view(self) -> dict:
        if self._view is None:
            self._view = example_view(self.example)
        return self._view

    @property
    def search(self) -> str:
        """The example and every rationale, lower-cased; what the export's search reads too (``JSON.stringify``)."""
        if self._search is None:
            texts = [json.dumps(self.view, ensure_ascii=False)]
            for systems in self.runs:
                for system, records in systems.items():
                    texts += [f"{system} {r.get('choice_label') or ''} {r.get('explanation') or ''}" for r in records]
            self._search = " ".join(texts).lower()
        return self._search

    def as_json(self, run_names: Sequence[str]) -> dict:
        return {
            "example": self.view,
            "runs": [{"run": name, "systems": systems} for name, systems in zip(run_names, self.runs, strict=True)],
            "flags": {"disagree": self.disagree, "wrong": sorted(self.wrong), "flipped": sorted(self.flipped)},
        }


def system_key(run: str, system: str) -> str:
    return f"{run}/{system}"


def _verdict(record: dict) -> tuple:
    """What two systems disagree on: the candidate chosen, or (no candidate to choose) the answer given."""
    choice = record.get("choice")
    return (record.get("target"), choice, record.get("choice_label") if choice is None else None)


def build_rows(runs: Sequence[Run], names: Sequence[str]) -> list[Row]:
    """Every example of every run, in the first run's order (then the others' new ones), joined by id."""
    order: dict[str, BaseModel] = {}
    for run in runs:
        for ex in run.examples:
            order.setdefault(ex.id, ex)
    per_run: list[dict[str, dict[str, list[dict]]]] = []
    for run in runs:
        by_example: dict[str, dict[str, list[dict]]] = {}
        for system, records in run.records.items():
            for record in records:
                by_example.setdefault(record["example_id"], {}).setdefault(system, []).append(record)
        per_run.append(by_example)
    rows = []
    for example_id, ex in order.items():
        systems_per_run = [found.get(example_id, {}) for found in per_run]
        wrong, flipped, judged, verdicts = set(), set(), set(), {}
        for name, systems in zip(names, systems_per_run, strict=True):
            for system, records in systems.items():
                key = system_key(name, system)
                judged.add(key)
                if any(r.get("correct") is False for r in records):
                    wrong.add(key)
                if any(o.get("changed") for r in records for o in (r.get("probes") or {}).values()):
                    flipped.add(key)
                for r in records:
                    verdicts.setdefault(r.get("target"), set()).add(_verdict(r))
        disagree = any(len(found) > 1 for found in verdicts.values())
        rows.append(
            Row(
                ex,
                topic_of(ex),
                whose(ex),
                systems_per_run,
                frozenset(wrong),
                frozenset(flipped),
                frozenset(judged),
                disagree,
            )
        )
    return rows


@dataclass
class Filters:
    """What the page asks for: each is off when empty / False."""

    wrong: bool = False
    disagree: bool = False
    flipped: bool = False
    topic: str = ""
    person: str = ""
    system: str = ""
    q: str = ""


def matches(row: Row, f: Filters) -> bool:
    """Whether a row passes the filters; ``system`` ("run/system") narrows wrong and flipped to that system."""
    if f.system and f.system not in row.judged_by:
        return False
    if f.wrong and not (f.system in row.wrong if f.system else row.wrong):
        return False
    if f.flipped and not (f.system in row.flipped if f.system else row.flipped):
        return False
    if f.disagree and not row.disagree:
        return False
    if f.topic and row.topic != f.topic:
        return False
    if f.person and row.whose != f.person:
        return False
    return not f.q or all(word in row.search for word in f.q.lower().split())


def facets(rows: Sequence[Row], runs: Sequence[Run], names: Sequence[str]) -> dict:
    """The values the filters offer: topics, persons and systems present in the rows."""
    return {
        "topics": sorted({r.topic for r in rows if r.topic}),
        "persons": sorted({r.whose for r in rows if r.whose}),
        "systems": [system_key(n, s) for n, run in zip(names, runs, strict=True) for s in run.systems],
    }
