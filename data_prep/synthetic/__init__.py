"""The SYNTHETIC samples: raw data with planted preferences and a ground truth, so every pipeline runs on a CPU."""
