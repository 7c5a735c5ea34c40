"""The validation of the policy an RL run starts from, computed once for all RL runs that start from one model.

Every RL run validates its policy before the first step (the curves' step 0). The arms and seeds of a study start
from the same SFT model and validate on the same split with greedy decoding, so that validation is the same for
all of them: a pure function of the policy's weights and of the settings that decoding and scoring read. The
first run to compute it writes it beside the model it starts from (`<init_from>/../start_validation/<key>.json`);
the others read it (the demo: 10 RL runs, one validation).

Exact by construction: the file is used only when the live policy equals the start snapshot bit for bit (so also
after a VAPR reset back to it) and the key covers everything but the settings that only training reads
(`NOT_READ_BY_VALIDATION`: the regularizer, the reference strategy, the optimizer, the sampler of the rollouts,
the seed; greedy validation does not draw random numbers). A field missing from that list only costs a recompute.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from harness.runs.digest import model_digest
from harness.runs.records import atomic_write_text

FOLDER = "start_validation"
# RL fields that the validation never reads (it reads the generation section, the data, the prompt, the reward
# and the validation score's fields, the temperature of its KL to the start policy).
NOT_READ_BY_VALIDATION = (
    "regularizer", "beta_min", "beta_base", "beta_max", "kl_target", "kl_horizon", "reference", "ema_rate",
    "ema_period", "reset_every_epochs", "val_every_steps", "old_sync_every", "old_sync", "select",
    "best_includes_start", "group_size", "prompts_per_step", "top_p", "top_k", "max_new_tokens", "min_new_tokens",
    "repetition_penalty", "eps_low", "eps_high", "dual_clip", "aggregation", "policy_dropout", "advantage_scale",
    "entropy_coef", "zero_std_groups", "regularizer_args", "reference_args", "samples_every", "token_weighting",
    "token_weight_boost", "token_weight_max", "micro_batch_size", "max_nonfinite_steps",
)
# Top-level fields of the run that the validation never reads: where it writes, its seed, the training loop's.
NOT_READ_TOP = ("out_dir", "seed", "train", "init_from", "cache_dir")


def start_validation_key(config: dict) -> str | None:
    """The key of the start policy's validation of a run whose resolved config is `config` (the record,
    harness/config: to_dict; None when RL starts from the base model)."""
    if not config.get("init_from"):
        return None
    d = copy.deepcopy(config)
    for name in NOT_READ_TOP:
        d.pop(name, None)
    for name in NOT_READ_BY_VALIDATION:
        d["rl"].pop(name, None)
    payload = json.dumps({"model": model_digest(config["init_from"]), "config": d}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def shared_start_validation(validate: Callable, config: dict, start, dist) -> Callable:
    """`validate` (of the run whose resolved config is `config`, the record) that reads the start policy's scores
    from the shared file when the live policy is the start snapshot `start` (a SnapshotStore holding "start" in the
    parameters' own dtypes), and writes them there the first time. Under data parallelism rank 0 decides and every
    rank returns its answer."""
    key = start_validation_key(config)
    if key is None or start.dtype is not None:
        return validate
    path = Path(config["init_from"]).parent / FOLDER / f"{key}.json"

    def read() -> dict | None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))["scores"]
        except (OSError, ValueError, KeyError):
            return None

    def validate_shared(model) -> dict:
        if not start.equal_to_live("start"):
            return validate(model)
        cached = read() if dist.main else None
        if dist.active:
            cached = dist.broadcast_object(cached)
        if cached is not None:
            return cached
        scores = validate(model)
        if dist.main:
            try:
                text = json.dumps({"key": key, "scores": scores}, sort_keys=True)
            except TypeError:  # a value JSON cannot hold: not shared, computed by every run
                return scores
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text + "\n")
        return scores

    return validate_shared
