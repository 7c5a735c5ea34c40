"""Token weighters (`rl.token_weighting`, DiTPO, paper 003): a rollout -> per-token weights of mean 1 per response,
which the engine turns into per-token advantages A[i, t] = w[i, t] * A[i]. One module per weighter, registered
with `@register_token_weighting` (registry.py); the weight formulas are pure functions in rewards/ditpo_weights.py.
May import harness.policy.logprobs, harness.registry and rewards, not the engine that builds the weighters
(harness/grpo): a weighter reads a rollout's fields and its policy's logits through `rollout.logits(model)`."""
