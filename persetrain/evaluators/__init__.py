"""The evaluator interface (``base``), one module per method and baseline, and the registry that names them."""
