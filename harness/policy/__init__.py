"""A policy and what it gives: the trainable parameters as named snapshots (snapshots: current, old, reference,
best are values of one store) and the chunked per-token log-probs and entropies of its logits (logprobs).
Imports only torch; the RL engine, the regularizers, the token weightings and the LM stages read it."""
