"""`train.handoff = best_val`: a warm-up or SFT stage hands on its best-validation epoch, as the official code does.

The official runner (reva_po/runners/runner_base.py) validates on the 'val' split after every epoch and saves
checkpoint_best.pth whenever agg_metrics beats the best so far (strictly: a tie keeps the earlier epoch); the next
stage starts from that file. Here each epoch's validation decodes the validation split greedily (the generation
section) and scores it with RL's s_val (harness/grpo/validation.py: rl.val_score / val_lambda / val_rg_metric;
`official` + 0.1 + radgraph is the official agg_metrics, reva_po/tasks/report_generation.py compute_metrics). The
best epoch's trainable tensors are kept (on the main process) and travel in every checkpoint of the loop
(harness/stages/lm_train.py StageState), so a resumed run knows the best epoch it had; at the end they become the
stage's `model/` and the last epoch's tensors `model_last/`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from harness.config import RunConfig
from harness.errors import ConfigError
from harness.grpo.validation import COMPLETION_COLUMNS, COMPLETIONS, validation_score
from harness.models.checkpoint import apply_tensors
from harness.models.trainable import trainable_state
from harness.parallel.distributed import Dist
from harness.prompting.samples import PromptSet
from harness.runs.records import RunDir

LAST_MODEL = "model_last"  # in a best_val stage's run folder: the last epoch's model, beside the chosen `model/`


class BestEpoch:
    """on_epoch_end hook of train_lm (validate, keep the best epoch) and its StageState (the best in checkpoints).

    `validate(model) -> scores` (harness/stages/rl.py make_validator: the NLG scores and `rg`)."""

    def __init__(self, cfg: RunConfig, model, validate: Callable, run: RunDir, dist: Dist | None = None):
        self.cfg, self.model, self.validate, self.run = cfg, model, validate, run
        self.dist = dist or Dist()
        self.best: dict | None = None  # {"val_score", "epoch", "step"} of the best epoch so far
        self.tensors: dict[str, torch.Tensor] | None = None  # its trainable tensors (main process only)

    # -- the hook ---------------------------------------------------------------------------------------
    def on_epoch_end(self, epoch: int, step: int) -> dict:
        was = self.model.training
        self.model.eval()  # greedy reports without (LoRA) dropout
        try:
            scores = dict(self.validate(self.model))
        finally:
            self.model.train(was)
        completions = scores.pop(COMPLETIONS, None)
        rl = self.cfg.rl
        score = validation_score(scores, rl.val_score, rl.val_lambda, scores.get("rg"))
        # The official `agg_metrics > best_agg_metric`: strictly better; NaN never is.
        improved = math.isfinite(score) and (self.best is None or score > self.best["val_score"])
        if improved:
            self.best = {"val_score": score, "epoch": epoch, "step": step}
            if self.dist.main:
                self.tensors = trainable_state(self.model)
        if completions and self.dist.main:
            self.run.log_table("val/completions", COMPLETION_COLUMNS, completions, step)
        return {**scores, "val_score": score, "improved": improved, **self.summary()}

    def summary(self) -> dict:
        """The chosen epoch, for evals.jsonl rows and metrics.json (None before any finite score)."""
        best = self.best or {}
        return {"best_val_score": best.get("val_score"), "best_epoch": best.get("epoch"),
                "best_step": best.get("step")}

    # -- StageState -------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"best": dict(self.best) if self.best else None, "tensors": self.tensors}

    def load_state_dict(self, state: dict) -> None:
        self.best = state.get("best")
        self.tensors = state.get("tensors") if self.dist.main else None

    # -- the end ----------------------------------------------------------------------------------------
    def use_best(self) -> bool:
        """Lay the best epoch's tensors over the live model (main process); False when no epoch had a finite
        score (the last epoch's model is then handed on, as `metrics.json`'s best_epoch None says)."""
        if self.tensors is None:
            return False
        apply_tensors(self.model, self.tensors, source="the best validation epoch")
        return True


def best_epoch_hook(cfg: RunConfig, model, processor, val_samples, instructions: list[str], images, run: RunDir,
                    dist: Dist | None = None) -> BestEpoch | None:
    """The BestEpoch of a stage with `train.handoff = best_val` (None with `last`): validation on `val_samples`
    (their references) with the stage's own prompts (`instructions`) and views (`images`)."""
    if cfg.train.handoff != "best_val":
        return None
    if not val_samples:
        raise ConfigError("train.handoff = best_val needs a validation split (it is empty); set train.handoff=last")
    # lazy: start-up cost (pandas, transformers)
    from harness.stages.rl import make_validator, validation_fields

    val = PromptSet([s.id for s in val_samples], images, list(instructions), [s.report for s in val_samples])
    return BestEpoch(cfg, model, make_validator(validation_fields(cfg), val, processor, dist), run, dist)


def save_handoff(hook: BestEpoch | None, save: Callable[[str, dict], None]) -> dict:
    """Write the stage's model folders through `save(folder_name, spec_extra)` (main process) and return what
    metrics.json records: with no hook, `model/` as before; with one, `model_last/` then the best epoch's `model/`."""
    if hook is None:
        save("model", {})
        return {}
    save(LAST_MODEL, {"handoff": "last"})
    chose = hook.use_best()
    info = {"handoff": "best_val" if chose else "last (no finite validation score)", **hook.summary()}
    save("model", info)
    return info
