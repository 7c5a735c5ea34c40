"""Stage 3's section (RLConfig): each field's help (meaning, unit or range, source) is its `help` metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.config.sections import knob


@dataclass
class RLConfig:
    """Stage 3 (REVA-PO Sec. 3.3, Algorithm 1). Defaults: the paper's MIMIC-CXR settings (Supp. D.2) and the
    official code where the paper is silent (docs/DESIGN.md "RL objective")."""

    regularizer: str = knob("rer", "Regularizer (regularizers/, any registered name): none | constant | adaptive | "
                                   "rer, or a class in your code as package.module:Class (a Regularizer "
                                   "subclass; README, Extending).")
    beta_min: float = knob(0.05, "RER lower bound, Eq. 7-9 (MIMIC-CXR 0.05; IU-Xray 0.05); 0 <= beta_min <= "
                                 "beta_base.")
    beta_base: float = knob(0.10, "RER base coefficient, Eq. 7-9 (MIMIC-CXR 0.10; IU-Xray 0.10); `constant` uses "
                                  "it as its beta, `adaptive` as its initial beta.")
    beta_max: float = knob(0.12, "RER upper bound, Eq. 7-9 (MIMIC-CXR 0.12; IU-Xray 0.15); >= beta_base.")
    kl_target: float = knob(0.05, "Adaptive PPO controller (Ziegler et al. 2019, Sec. 2.2): target in per-token "
                                  "nats of the loop's KL estimate (their 6 nats per sequence over ~120 report "
                                  "tokens = 0.05; a project choice, regularizers/adaptive.py), > 0.")
    kl_horizon: int = knob(10000, "Adaptive PPO controller (Ziegler et al. 2019): horizon in samples, > 0.2 x "
                                  "prompts_per_step x group_size so beta stays > 0.")
    reference: str = knob("vapr", "Reference strategy (regularizers/reference/, any registered name): static | ema "
                                  "| vapr, or a class in your code as package.module:Class (a ReferenceStrategy "
                                  "subclass).")
    ema_rate: float = knob(0.01, "EMA reference: weight of the current policy per update, in [0, 1].")
    ema_period: int = knob(1, "EMA reference: update every k optimizer steps, >= 1.")
    reset_every_epochs: int = knob(3, "VAPR: reset reference, current and old policies to the best every M epochs "
                                      "(M = 3, Supp. D.2), >= 1.")
    val_every_steps: int | None = knob(None, "Optional validation every K optimizer steps in addition to each "
                                             "epoch end (null = epoch ends only).")
    old_sync_every: int = knob(16, "Old policy synced to the current one every N optimizer steps (N = 16, Supp. "
                                   "D.2), >= 1.")
    old_sync: str = knob("per_epoch", '"per_epoch" counts N within each epoch and re-syncs at each epoch start '
                                      "(Algorithm 1 lines 4 and 10: `step` runs 1..S in every epoch; the official "
                                      'code does the same); "global" counts optimizer steps over the whole run.')
    select: str = knob("best_val", 'Which RL policy is saved and tested, the same rule for every arm: "best_val" '
                                   "(the policy with the best validation score s_val, rl.val_score, as the official "
                                   'runner tests) or "final" (the last policy). The run records the step it came '
                                   "from (metrics.json: selected_step). Also defines VAPR's anchor "
                                   "(harness/grpo/selection.py).")
    best_includes_start: bool = knob(False, 'Whether the starting policy (validation at step 0) may be "best"; '
                                            "official: no (best starts at -inf, so VAPR's first reset always lands "
                                            "on a trained policy). Also defines VAPR's anchor "
                                            "(harness/grpo/selection.py).")
    group_size: int = knob(4, "Rollouts: G candidates per prompt from the old policy (G = 4, Supp. D.2), >= 2.")
    prompts_per_step: int = knob(8, "Prompts per optimizer step, >= 1.")
    temperature: float = knob(0.7, "Rollout sampling temperature (Supp. D.2: 0.7), > 0.")
    top_p: float = knob(0.9, "Rollout nucleus sampling (Supp. D.2: 0.9), in (0, 1].")
    top_k: int = knob(0, "Rollout top-k (0 = off, Supp. D.2).")
    max_new_tokens: int = knob(160, "Rollout length cap in tokens, >= 1.")
    min_new_tokens: int = knob(80, "Rollout minimum length in tokens, <= max_new_tokens.")
    repetition_penalty: float = knob(1.03, "Rollout repetition penalty, > 0.")
    eps_low: float = knob(0.2, "Surrogate (Eq. 3-5): lower clip of the ratio, 1 - eps_low, in [0, 1) (asymmetric "
                               "clip, DAPO).")
    eps_high: float = knob(0.28, "Surrogate (Eq. 3-5): upper clip of the ratio, 1 + eps_high, >= 0 (asymmetric "
                                 "clip, DAPO).")
    dual_clip: float | None = knob(10.0, "Surrogate: the official code's dual clip c = 10 for negative advantages, "
                                         "> 1 or null (off).")
    kl_estimator: str = knob("k3", "KL estimator per token (harness/grpo/core.py kl_penalty): k1, k2, k3 (Eq. 6; "
                                   "the official code) or k3_is: k3 times the importance ratio pi_theta / pi_old, "
                                   "whose gradient is the unbiased reverse-KL gradient off-policy (DeepSeek-V3.2 "
                                   "Sec. 3.1; TRL's GRPOConfig use_bias_correction_kl, its default since 1.x); "
                                   "loss placement only. With rl.kl_placement reward: k1 as verl's kl_penalty 'kl', "
                                   "k2 its 'mse', k3 its 'low_var_kl'.")
    kl_placement: str = knob("loss", "Where the KL to the reference acts: loss = a per-token term beta_i KL of the "
                                     "loss (Eq. 3; the official code, TRL's beta); reward = subtracted from each "
                                     "response's reward before the group advantages, R_i - beta_i sum_t KL_t, with "
                                     "KL between the old (sampling) policy and the reference, no gradient (verl's "
                                     "algorithm.use_kl_in_reward: token_level_rewards = scores - beta kld, summed "
                                     "per response by its GRPO advantage). The betas come from rl.regularizer as "
                                     "in the loss (RER's from the task reward's advantages; this project). "
                                     "Combine with rl.kl_estimator k1 for verl's default.")
    kl_reward_reduce: str = knob("sum", "rl.kl_placement reward: the per-token KL summed over the response (sum; "
                                        "verl, whose GRPO advantage sums the token-level rewards) or its token mean "
                                        "(mean; length-independent, this project).")
    kl_cap: float | None = knob(10.0, "Cap on the per-token k3 (and k3_is before the ratio): 10 as the official "
                                      "code and verl's kl_penalty low_var_kl (docs/paper_vs_code.md, k3 cap); "
                                      "null = no cap (Eq. 6 as written; TRL's GRPOTrainer._compute_loss), > 0.")
    aggregation: str = knob("token_mean", "Loss aggregation (harness/aggregation/, aggregate): token_mean (all "
                                          "tokens of the step, DAPO; this project's default), group_token_mean "
                                          "(per group, then the mean over groups: Eq. 3 as written, and what the "
                                          "official code computes, 1 prompt per GPU with each rank's token mean "
                                          "averaged over the ranks; the paper presets; equal for any number of "
                                          "processes and micro-batches), seq_mean_token_mean (original GRPO), "
                                          "dr_grpo (Liu et al. 2025: token sum / (N x max_new_tokens); needs "
                                          "advantage_scale none, as Dr. GRPO also drops the std division), "
                                          "seq_mean_token_mean_all / seq_sum (TRL's loss_type grpo / luspo: "
                                          "harness/aggregation/trl_sequence.py). docs/paper_vs_code.md.")
    policy_dropout: bool = knob(False, "Whether the current policy's forward pass (the one with grad) runs in "
                                       "train mode, so that model.lora_dropout is active in it, as in the official "
                                       "code (the paper presets); the rollouts and the old, reference and "
                                       "validation passes stay in eval mode (deterministic) either way. false "
                                       "(this project's default): dropout off in every pass, so the ratio is "
                                       "exactly 1 while current = old. With true the old / reference passes always "
                                       "run (a snapshot equal to the live weights no longer shares the current "
                                       "pass's values), and micro-batches or processes draw their own dropout "
                                       "masks (equal to one batch in expectation, not bit for bit). "
                                       "docs/paper_vs_code.md.")
    lora_pass: str = knob("peft", "How LoRA layers compute in the GRPO log-prob passes (old, reference, current; this "
                                  "project, issue 27): peft = base(x) + s B(A(x)), peft's own layers; merged = one "
                                  "product with W + s B A (harness/models/merged_lora.py): the same linear map and "
                                  "gradients to float rounding, not bit for bit, a training pass in ~0.8x the time "
                                  "at the tiny testbed's widths. Needs rl.policy_dropout false and float32 weights.")
    prompt_pass: str = knob("per_row", "How the GRPO log-prob passes (old, reference, current) compute the "
                                       "prompt (this project, issue 27): per_row = every row's whole sequence, "
                                       "the model's own forward; shared = each group's prompt once, its keys and "
                                       "values shared by the G responses (harness/grpo/shared_prompt.py): the "
                                       "same logits and gradients to float rounding, not bit for bit, a pass in "
                                       "~0.7x the time at 8 prompts x 4. Needs rl.policy_dropout false.")
    advantage_scale: str = knob("std", 'Advantage scale (Eq. 2): "std" divides by the group\'s std (+1e-6); '
                                       '"none" keeps R - mean (Dr. GRPO).')
    advantage_std: str = knob("population", 'The group std of Eq. 2 (rl.advantage_scale std): "population" divides '
                                            "by G (the official code; numpy/torch unbiased=False) or \"bessel\" by "
                                            "G - 1 (TRL's GRPOTrainer, rewards.std(): advantages sqrt((G-1)/G) "
                                            "times the population ones, 0.866x at G = 4).")
    importance_sampling: str = knob("token", "Importance ratio of the surrogate: token (pi_theta / pi_old per "
                                             "token; PPO, the official code) or sequence (the geometric mean of the "
                                             "token ratios over the response, exp(mean_t log r_t), clipped once per "
                                             "response: GSPO, Zheng et al. 2025 Eq. 7; TRL's "
                                             "importance_sampling_level sequence).")
    surrogate: str = knob("clip", "Policy surrogate (harness/grpo/core.py surrogate_loss): clip (PPO's clipped "
                                  "ratio, eps_low / eps_high; the official code), cispo (the ratio clipped at 1 + "
                                  "eps_high and detached, times A log pi: every token keeps a gradient; MiniMax-M1 "
                                  "Sec. 3.1, TRL's loss_type cispo with epsilon_high = 1 + eps_high) or sapo (a "
                                  "sigmoid gate 4/tau sigmoid(tau (r - 1)) in place of the clip; SAPO, Gao et al. "
                                  "2025, TRL's loss_type sapo). cispo and sapo need rl.dual_clip null.")
    sapo_tau_pos: float = knob(1.0, "rl.surrogate sapo: gate temperature for A > 0 (TRL's sapo_temperature_pos, "
                                    "1.0), > 0.")
    sapo_tau_neg: float = knob(1.05, "rl.surrogate sapo: gate temperature for A <= 0 (TRL's sapo_temperature_neg, "
                                     "1.05), > 0.")
    entropy_coef: float = knob(0.0, "Entropy bonus, >= 0 (0 for MIMIC-CXR, 0.001 for IU-Xray).")
    logprob_temperature: float | None = knob(None, "Temperature of the logits used for log-probs/KL/entropy; null "
                                                   "= the sampling temperature (official code); 1.0 = the paper's "
                                                   "literal equations.")
    zero_std_groups: str = knob("keep", "Groups whose rewards are all equal: keep (their tokens still count in the "
                                        "denominators and the KL term, official code) or drop (removed from the "
                                        "loss).")
    reward: str | dict[str, float] = knob("bleu4", "Reward (rewards/spec.py): a registered name (bleu4), any "
                                                   "importable function with the reward signature fn(candidates, "
                                                   "references, **context) as package.module:function, or a "
                                                   "weighted sum of either, {bleu4: 0.5, chexpert_f1: 0.5} "
                                                   "(rewards/composite.py: weights finite, >= 0, used as given; "
                                                   "this project, as TRL's reward_funcs / reward_weights).")
    regularizer_args: dict[str, Any] = knob(help="Options of a registered regularizer that RLConfig has no field "
                                                 "for (a plug-in's own knobs, by the class's field names; e.g. "
                                                 "{scale: 0.5}). Fields RLConfig has are passed by name already.",
                                            default_factory=dict)
    reference_args: dict[str, Any] = knob(help="Options of a registered reference strategy that RLConfig has no "
                                               "field for, by the class's field names (as regularizer_args).",
                                          default_factory=dict)
    val_score: str = knob("paper", "Validation score s_val, which picks the best policy (rl.select best_val: the "
                                   "tested checkpoint) and VAPR's anchor: paper = Eq. 10, (sum(M) + lambda RG) / "
                                   "(|M| + 1); official = the official code, mean(M) + lambda RG (RG weighs 6x "
                                   "more against the metrics than in Eq. 10; the paper presets); M = BLEU-1..4, "
                                   "METEOR, ROUGE-L. The report tables state it. docs/paper_vs_code.md.")
    val_lambda: float = knob(0.1, "lambda of the validation score (Eq. 10: 0.1), >= 0.")
    val_rg_metric: str = knob("entity_f1", "RG of the validation score: the paper uses RadGraph F1 (radgraph-xl, "
                                           "partial: `radgraph`, needs its weights); the default is the offline "
                                           "clinical-entity F1 (`entity_f1`, rewards/entity.py), which runs "
                                           "anywhere; `none` requires val_lambda = 0.")
    val_max_samples: int | None = knob(None, "Cap on validation samples (null = all).")
    samples_every: int = knob(10, "Write sampled candidates with rewards/advantages/betas to samples.jsonl every k "
                                  "steps (0 = never).")
    token_weighting: str = knob("none", "DiTPO (paper 003) token weighting of the advantages, A[i, t] = w[i, t] "
                                        "A[i]: none | gradient (DiTPO's main setting) | tfidf (its rule-based "
                                        "variant) | any weighter registered in harness/token_weighting/. The paper "
                                        "gives no formula: the weights are this project's (rewards/ditpo_weights.py).")
    token_weight_boost: float = knob(2.0, "tfidf token weighting: factor on the raw weight of diagnostic words "
                                          "(rewards/ditpo_weights.py; this project), > 0.")
    token_weight_max: float | None = knob(None, "gradient token weighting: cap on a token's weight "
                                                "(rewards/ditpo_weights.py gradient_weights; this project), > 0 or "
                                                "null (no cap).")
    logprob_chunk_positions: int | None = knob(None, "Logit positions upcast to fp32 at once in token_logprobs / "
                                                     "token_entropy (null: sized for ~16 MiB).")
    micro_batch_size: int | None = knob(None, "Responses per forward/backward pass (this project): the frozen "
                                              "(old/ref) log-prob passes and the policy's backward run over "
                                              "micro-batches of this many responses, the rollouts over "
                                              "micro-batches of max(1, micro_batch_size // group_size) prompts; the "
                                              "loss normalisers stay those of the whole step, so the gradient "
                                              "equals the one-batch gradient. null = each process's whole share in "
                                              "one pass.")
    max_nonfinite_steps: int = knob(5, "A step whose loss or gradient is not finite is skipped (no optimizer "
                                       "step), logged and counted; after this many in a row the run stops with an "
                                       "error naming the first cause, leaving a resumable checkpoint (this project; "
                                       "issue 13), >= 1.")


def pass_option_problem(rl: RLConfig) -> tuple[str, Any, str] | None:
    """(key, value, why) of the first RL speed option the protocol forbids in this config, or None: the one list
    of those rules, read by the config's validation (harness/config/validation.py) and by the engine when it chooses
    its passes (harness/grpo/passes.py)."""
    if rl.lora_pass not in ("peft", "merged"):
        return "rl.lora_pass", rl.lora_pass, "must be peft or merged"
    if rl.prompt_pass not in ("per_row", "shared"):
        return "rl.prompt_pass", rl.prompt_pass, "must be per_row or shared"
    if rl.lora_pass == "merged" and rl.policy_dropout:
        return ("rl.lora_pass", rl.lora_pass,
                "needs rl.policy_dropout false (LoRA dropout acts on A's input alone; one merged weight cannot)")
    if rl.prompt_pass == "shared" and rl.policy_dropout:
        return ("rl.prompt_pass", rl.prompt_pass,
                "needs rl.policy_dropout false (one prompt computation would share one dropout draw across its group)")
    return None
