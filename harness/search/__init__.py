"""Optuna searches over a study's knobs: the search file, its space, objective, storage, drivers and record.
May import harness.experiments (a trial is an experiment arm), harness.runs and harness.config; only the CLI above."""
