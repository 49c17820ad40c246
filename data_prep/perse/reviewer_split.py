"""The reviewer-disjoint 9:1 split of the PerSE datasets (the paper's): a reviewer's examples are all in train or
all in test, so a judge is tested on reviewers whose preferences it never trained on.

The split hashes the reviewer id with the seed, so a reviewer's split never depends on who else is in the data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from persetrain.schema import PairwiseExample, ScalarExample, reviewer_of

#: One test reviewer in ``TEST_BUCKETS`` (the paper's 9:1 split).
TEST_BUCKETS = 10

Example = ScalarExample | PairwiseExample


def is_test_reviewer(reviewer_id: str, seed: int) -> bool:
    """Test when sha256("<seed>:<reviewer id>") mod 10 == 0: stable across runs, machines and data."""
    digest = hashlib.sha256(f"{seed}:{reviewer_id}".encode()).hexdigest()
    return int(digest, 16) % TEST_BUCKETS == 0


def check_reviewer_disjoint(splits: Mapping[str, Sequence[Example]]) -> None:
    """Refuse a split that lets a reviewer's preferences leak from training into test."""
    owner: dict[str, str] = {}
    for split, examples in splits.items():
        for example in examples:
            reviewer = reviewer_of(example)
            if owner.setdefault(reviewer, split) != split:
                raise ValueError(f"reviewer {reviewer!r} is in both the {owner[reviewer]!r} and {split!r} splits")


def split_by_reviewer(examples: Sequence[Example], seed: int) -> dict[str, list[Example]]:
    """Train / test by ``is_test_reviewer``, checked disjoint."""
    splits: dict[str, list[Example]] = {"train": [], "test": []}
    for example in examples:
        splits["test" if is_test_reviewer(reviewer_of(example), seed) else "train"].append(example)
    check_reviewer_disjoint(splits)
    return splits
