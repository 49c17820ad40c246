"""Training: YAML recipes parsed into dataclasses (``recipe``) and TRL trainers driven by them (``sft``).

Submodules are imported on use: ``persetrain.train.sft`` pulls in TRL, which a command that only
evaluates should not pay for.
"""
