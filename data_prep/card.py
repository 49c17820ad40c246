"""The one writer of a prepared dataset's card: ``README.md`` (for people and the Hub) beside ``build_info.json``.

Every ``persetrain prepare`` command's card has the same shape, so that a user reads any of them the same way and
``persetrain push --dataset`` (``persetrain.hub.cards``) can add the Hub's metadata to any of them: YAML front matter
(``pretty_name``, the sources' licence, the tags, ``synthetic`` where the rows are), the title, a few paragraphs
saying what a row is and how it was built, one ``## `` section per question (sources, splits, balance, columns,
settings), and the licence last. Each method's card module decides only the words and the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from data_prep.licenses import License
from persetrain.io import write_json


def synthetic_note(what: str) -> str:
    """The warning paragraph of a card whose rows are SYNTHETIC: ``what`` says where they came from."""
    return f"> **Synthetic data.** {what}\n"


def bullets(values: Mapping[str, object]) -> str:
    """``- key: value`` lines: the settings, the rows left out, a balance per split."""
    return "\n".join(f"- {key}: {value}" for key, value in values.items())


def source_topic_table(info: Mapping, totals: Mapping[str, Mapping[str, int]]) -> str:
    """Rows per ``source/topic`` (``info["counts"]``) and split, then one bold row per entry of ``totals``
    (its label -> a count per split)."""
    splits = list(info["splits"])
    keys = sorted({k for counts in info["counts"].values() for k in counts})
    table = ["| source/topic | " + " | ".join(splits) + " |", "|---" + "|---:" * len(splits) + "|"]
    table += [f"| {k} | " + " | ".join(str(info["counts"][s].get(k, 0)) for s in splits) + " |" for k in keys]
    table += [f"| **{label}** | " + " | ".join(str(n[s]) for s in splits) + " |" for label, n in totals.items()]
    return "\n".join(table)


def render_card(
    title: str,
    *,
    tags: Sequence[str],
    license: License | None,
    synthetic: bool,
    intro: Iterable[str],
    sections: Iterable[tuple[str, str | None]],
) -> str:
    """A card: front matter, ``# title``, the ``intro`` paragraphs, one ``## heading`` per section whose body is
    not None (a section a dataset has nothing for is left out), and the licence's section.

    ``tags`` follow ``persetrain`` and precede ``synthetic``; each ``intro`` paragraph ends with its own newline."""
    tag_lines = "".join(f"- {tag}\n" for tag in ("persetrain", *tags, *(["synthetic"] if synthetic else [])))
    front = f'---\npretty_name: "{title}"\n' + (license.front_matter() if license else "") + "tags:\n"
    blocks = [front + tag_lines + "---\n", f"# {title}\n", *intro]
    for heading, body in sections:
        if body is not None:
            blocks += [f"## {heading}\n", body, ""]
    if license:
        blocks.append(license.section())
    return "\n".join(blocks)


def write_card(folder: Path, info: Mapping, card: str) -> None:
    """Write ``build_info.json`` (``info``, machine-read: ``persetrain.data`` reads its task kind) and ``README.md``
    (``card``) into a dataset folder being built (inside ``persetrain.io.atomic_dir``)."""
    write_json(folder / "build_info.json", info)
    (folder / "README.md").write_text(card, encoding="utf-8")
