"""``persetrain evaluators NAME``: what each option of an evaluator means, the records it reads, two example lines.

An evaluator's config dataclass is its whole documented surface (``evaluators.base``): every field carries a
``#:`` comment above it, the form Sphinx reads as an attribute's doc. Those comments are read here from the
source, so the command says what the code says. The records are its task kinds' models (``persetrain.schema``)
and their examples come from the one place they are written, ``persetrain.tasks.RECORD_EXAMPLES``, which
``docs/formats.md`` shows too.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import sys
import textwrap

from persetrain.evaluators.base import Evaluator, EvaluatorConfig
from persetrain.evaluators.registry import get_evaluator
from persetrain.helptext import plain_text
from persetrain.tasks import get_task, record_examples

#: Prose is wrapped at this width; example records stay one line each, as in a JSONL file.
WIDTH = 100


def option_docs(config: type[EvaluatorConfig]) -> dict[str, str]:
    """Each field's ``#:`` comment (its lines joined), from the class that declares the field; "" where none.

    A comment above a run of fields with no blank line between them is the run's (``max_samples`` and
    ``sample_words``: "Writing samples of the user shown, and the words kept of each").
    """
    docs: dict[str, str] = {}
    for cls in reversed(config.__mro__):  # a subclass that re-declares a field documents it anew
        if not dataclasses.is_dataclass(cls):
            continue
        lines, _ = inspect.getsourcelines(cls)
        shared, last_line = "", -1
        for node in ast.parse(textwrap.dedent("".join(lines))).body[0].body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                above = node.lineno - 2  # the line before the field, 0-based
                comment = []
                while above >= 0 and lines[above].strip().startswith("#:"):
                    comment.insert(0, lines[above].strip()[2:].strip())
                    above -= 1
                if comment or node.lineno != last_line + 1:
                    shared = " ".join(comment)
                docs[node.target.id], last_line = shared, node.end_lineno
    return {field.name: docs.get(field.name, "") for field in dataclasses.fields(config)}


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return "required"


def _first_paragraph(doc: str | None) -> str:
    return plain_text(" ".join((doc or "").split("\n\n")[0].split()))


def _wrapped(text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent=" " * indent, subsequent_indent=" " * indent)


def describe(name: str) -> str:
    """The text ``persetrain evaluators NAME`` prints: the method, its options, the records it reads, examples."""
    evaluator: type[Evaluator] = get_evaluator(name)
    model = f"runs on a model: --system {name}:MODEL" if evaluator.needs_model else f"needs no model: --baseline {name}"
    summary = _first_paragraph(evaluator.__doc__ or sys.modules[evaluator.__module__].__doc__)
    lines = [*textwrap.wrap(f"{name}: {summary}", width=WIDTH, subsequent_indent="  "), f"  {model}", ""]
    fields = dataclasses.fields(evaluator.Config)
    docs = option_docs(evaluator.Config)
    lines.append("options (--set FIELD=VALUE):" if fields else "options: none")
    for field in fields:
        lines.append(f"  {field.name} = {_default(field)}")
        lines += _wrapped(plain_text(docs[field.name]) or "(undocumented)", 6)
    for split, why in evaluator.needs.splits.items():
        lines.append(f"also reads the split '{split}': {why}")
    for kind in evaluator.tasks:
        record = get_task(kind).example
        required = [key for key, info in record.model_fields.items() if info.is_required()]
        optional = [key for key in record.model_fields if key not in required]
        lines += [
            "",
            *textwrap.wrap(f"reads {kind} records ({record.__name__}): {_first_paragraph(record.__doc__)}", WIDTH),
        ]
        fields_line = f"fields: {', '.join(required)}" + (f"; optional: {', '.join(optional)}" if optional else "")
        lines += _wrapped(fields_line, 2)
        for need in evaluator.needs.fields:
            if need.task == kind:
                lines.append(f"  checked in every record: {need.field}")
        for layout, examples in record_examples(kind).items():
            lines.append(
                f'  example ({layout}), two lines of a JSONL file with a dataset.json card {{"task": "{kind}"}}:'
            )
            lines += [f"    {json.dumps(example, ensure_ascii=False)}" for example in examples]
    return "\n".join(lines)
