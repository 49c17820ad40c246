"""Preference data for reward models and yes/no verifiers: groups of options from PrefEval, PerSE and PARL data."""
