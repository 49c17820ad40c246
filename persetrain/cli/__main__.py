"""``python -m persetrain.cli``: the same application as the ``persetrain`` script."""

import sys

from persetrain.cli import app

sys.exit(app())
