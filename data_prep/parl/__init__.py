"""PARL's pipeline: task layouts, negatives, rubric-induction and reference datasets, and the rule verifier's data."""
