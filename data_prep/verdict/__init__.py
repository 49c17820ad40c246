"""Verdict prompts with their gold verdict, for judges trained by GRPO on their own verdicts (``prepare verdict``)."""
