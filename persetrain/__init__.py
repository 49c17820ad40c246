"""persetrain: train and run learned evaluators of personalized text."""

import os

# Our loops show one kind of progress bar (persetrain.console); the per-file bars of the HF libraries
# ("Loading weights", "Saving the dataset") would interleave with them, so they are off unless asked for.
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
