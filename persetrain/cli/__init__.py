"""The ``persetrain`` command. Each command parses its options and calls library code; no logic lives here.

One module per area registers its commands on the shared :data:`app` (:mod:`persetrain.cli.common`):
``models`` (model specs, ``generate``, ``serve``), ``prepare`` (datasets, ``generate-baselines``), ``train``
(``rubrics``, ``sft``, ``rm``, ``grpo``), ``evaluate`` (``evaluate``, ``meta-eval``, ``evaluators``, ``demo``),
``view`` (``view``, ``compare``), ``launch`` and ``hub`` (``push``). ``persetrain.cli:app`` is the console
script; ``python -m persetrain.cli`` runs the same app.
"""

from persetrain.cli.common import app, main, plain_help

__all__ = ["app", "main"]

# Imported for their side effect, registering their commands on ``app``: ``persetrain --help`` lists them in
# this order, so it is not sorted.
from persetrain.cli import models, prepare, train, evaluate, view, launch, hub  # noqa: E402, F401, I001

plain_help(app)
