"""The demos: PerSE and PARL end to end on the embedded model, on a CPU, as a newcomer's first run."""
