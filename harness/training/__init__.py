"""What every training loop shares: the learning-rate schedule and the seeded order of each epoch (schedule), and
the checkpoint protocol by which a loop's resumable state becomes a checkpoint generation and comes back
(checkpoints). May import harness.config and harness.runs only; the classifier, LM and RL loops read it."""
