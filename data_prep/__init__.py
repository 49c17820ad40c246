"""Raw data to training and evaluation datasets, one package per pipeline (see README.md beside this file)."""
