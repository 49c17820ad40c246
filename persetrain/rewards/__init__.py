"""Reward functions for GRPO: pure math over judge scores, with thin adapters per trainer.

``parl`` is the PARL rubric reward (math, parsing and the batched yes/no judge); ``parl_trl`` and
``parl_verl`` call it with TRL's and verl's reward signatures; ``perse`` turns a trained PerSE judge
into a TRL reward function for training a personalized generator; ``verdict`` holds the RL verdict judges'
rewards. ``registry`` names them all for a recipe's ``reward_funcs``.
"""
