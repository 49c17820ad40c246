"""The TRL-private methods persetrain's GRPO trainer overrides, checked against the installed TRL.

``SharedPromptGRPOTrainer`` replaces three private ``GRPOTrainer`` methods (rollout generation, the per-token
log-probs, the reward call) to compute each prompt once. Private methods change shape inside a major
version (TRL 1.15 gave ``_generate_single_turn`` its fifth argument), and an override written against
another shape fails mid-step with a traceback nobody can act on. So their signatures are compared at
import time with the ones the overrides were written against; on a mismatch the trainer says so in one
line and the stock ``GRPOTrainer`` runs instead: slower, the same loss. What the names cannot show (what TRL
passes and expects back) ``tests/test_trl_overrides.py`` checks by training with both trainers; persetrain pins
``trl`` to the minor release that passed it, and ``make test-latest`` runs it on the newest release and ends with
:func:`pin_verdict`'s line (``python -m persetrain.train.trl_compat STATUS``).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import warnings

from packaging.requirements import Requirement
from packaging.version import Version

#: Method -> the leading parameters the override was written against (TRL 1.15-1.16). Trailing parameters
#: TRL adds (multimodal keywords) pass through ``**kwargs`` and are not compared.
EXPECTED: dict[str, tuple[str, ...]] = {
    "_generate_single_turn": (
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ),
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
    ),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
}


def signature_mismatches(base: type, expected: dict[str, tuple[str, ...]] = EXPECTED) -> list[str]:
    """``method: expected (...), found (...)`` for each overridden method whose signature differs in ``base``."""
    found = []
    for name, params in expected.items():
        method = getattr(base, name, None)
        have = tuple(inspect.signature(method).parameters)[: len(params)] if method is not None else ()
        if have != params:
            found.append(f"{name}: expected ({', '.join(params)}), found ({', '.join(have) or 'no such method'})")
    return found


def pick_trainer(fast: type, stock: type, version: str, expected: dict[str, tuple[str, ...]] = EXPECTED) -> type:
    """``fast`` when ``stock`` still has the signatures its overrides expect, else ``stock`` with a one-line warning."""
    mismatches = signature_mismatches(stock, expected)
    if not mismatches:
        return fast
    warnings.warn(
        f"TRL {version}: {stock.__name__}.{'; '.join(mismatches)} - persetrain's shared-prompt "
        f"overrides are off and the stock {stock.__name__} trains (slower, the same loss)",
        stacklevel=2,
    )
    return stock


def pin_verdict(version: str, passed: bool, requirement: str | None = None) -> str:
    """One line: whether TRL ``version``, on which the override checks ``passed`` or not, fits persetrain's pin.

    ``requirement`` is the installed persetrain's ``trl`` requirement unless given.
    """
    pin = Requirement(requirement or next(r for r in importlib.metadata.requires("persetrain") if r.startswith("trl")))
    found = Version(version)
    if found in pin.specifier:
        return f"trl {found} is inside the pin {pin}: the override checks {'pass' if passed else 'FAIL'} on it"
    if not passed:
        return f"trl {found} fails the override checks (tests/test_trl_overrides.py): keep the pin {pin}"
    upper = f"<{found.major}.{found.minor + 1}"
    return f"trl {found} passes the override checks: the pin {pin} can move its upper bound to {upper}"


if __name__ == "__main__":  # make test-latest: the tests' exit status in, the verdict out, the status kept
    import trl

    print(pin_verdict(trl.__version__, sys.argv[1] == "0"))
    sys.exit(int(sys.argv[1]))
