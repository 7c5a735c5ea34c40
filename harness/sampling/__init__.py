"""Decoding reports from a policy: the lean loop (generate's tokens, less overhead), HF generate, vLLM, lean forward.
May import harness.models and harness.prompting.batching; the GRPO rollout, validation and evaluation sit above it."""
