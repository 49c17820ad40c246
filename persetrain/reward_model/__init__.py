"""A trained reward model's inputs, batches and scorer: one package, so a checkpoint is read the way it was trained."""
