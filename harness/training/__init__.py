"""What every training loop shares: the learning-rate schedule and the seeded order of each epoch (schedule).
May import harness.config only; the classifier, LM and RL loops read it."""
