"""Doc markup as the plain text a terminal shows: help of the trainers' keys, of evaluators and their records.

Help texts come from docstrings and field metadata written for Sphinx (``:class:`~a.B```, double backquotes)
and from transformers' and TRL's doc-builder (``[`~a.B`]``); ``--help`` shows them as TRL's own help writes
code, in single backquotes.
"""

from __future__ import annotations

import re

#: ":class:`~a.b.C`" (Sphinx) and "[`~a.b.C`]" (doc-builder): "~" shows only the last name.
_REFERENCE = re.compile(r":[a-z:]+:`(~?)([^`]+)`|\[`(~?)([^`\]]+)`\]")
_DOUBLE_BACKQUOTES = re.compile(r"``([^`]+)``")


def plain_text(text: str) -> str:
    """``text`` without doc markup: references as the name they show, code in single backquotes."""

    def reference(match: re.Match) -> str:
        tilde, name = (match.group(1), match.group(2)) if match.group(2) else (match.group(3), match.group(4))
        return f"`{name.rsplit('.', 1)[-1] if tilde else name}`"

    return _DOUBLE_BACKQUOTES.sub(r"`\1`", _REFERENCE.sub(reference, text))
