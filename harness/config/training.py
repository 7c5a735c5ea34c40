"""The optimizer and schedule sections: `StepConfig` (the fields every trained stage shares), `TrainConfig`
(stages 1-2 and RL: `train:`) and `PretrainConfig` (stage 0: `pretrain:`). Each field's help names its source, as
in sections.py ("REVA-PO" = the paper, "official code" = REVA-PO's released code, "this project" = ours)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from harness.config.sections import knob, redefault


@dataclass
class StepConfig:
    """The optimizer and schedule fields that stage 0 (PretrainConfig) and stages 1-2 (TrainConfig) share."""

    epochs: float = knob(1.0, "Passes over the training set (fractions allowed), > 0.")
    batch_size: int = knob(16, "Samples per optimizer step over all processes, > 0.")
    lr: float = knob(1e-3, "Peak learning rate (AdamW), > 0.")
    weight_decay: float = knob(0.0, "AdamW weight decay, >= 0.")
    warmup_steps: int = knob(0, "Learning-rate warm-up, in optimizer steps (a count, not a fraction of the run: "
                                "the official configs state counts for the full training set).")
    vision_lr_mult: float = knob(1.0, "Learning-rate multiplier for the vision tower and merger (1 = the paper's "
                                      "single lr).")
    group_by_length: bool = knob(False, "Batches of samples of similar length (transformers' Trainer "
                                        "`group_by_length`: harness.training.schedule.length_grouped_order), so fewer "
                                        "pad positions are computed: a tiny-preset stage-0 step in 0.83x the time, an "
                                        "SFT step in 0.93x (benchmarks/bench_group_by_length.py). Other batches, so "
                                        "other weights, and the loss stays a token mean per batch, so a batch of "
                                        "short answers weighs each of its tokens more than a mixed batch would. "
                                        "Measured on tiny-power Table 4 (stage 0, warm-up and SFT grouped, 3 "
                                        "seeds): test gold findings F1 0.66-0.71 per arm instead of 0.80-0.81, so "
                                        "no preset turns it on (benchmarks/RESULTS.md, issue 27). Off = the seeded "
                                        "random order; keyed only when on.")


@dataclass
class TrainConfig(StepConfig):
    scheduler: str = knob("cosine", 'Learning-rate schedule after the warm-up (train.warmup_steps, '
                                    'train.warmup_type): "cosine" = to 0 at the last step (this project; stage 0 '
                                    'and the tiny presets); "constant" / "warmup_constant" = flat at train.lr (the '
                                    'official stages 2 and 3: DeepSpeed WarmupLR, train_configs/stage{2,3}/'
                                    'zero_*.json); "warmup_cosine" = cosine from train.lr to train.cos_min_ratio x '
                                    'train.lr at train.cosine_total_steps (DeepSpeed WarmupCosineLR: the official '
                                    'stage 1, train_configs/stage1/zero_*_stage1.json). harness/training/schedule.py.')
    warmup_type: str = knob("project", "How the rate rises over W = train.warmup_steps, at optimizer update k = 0, "
                                       "1, ...: 'project' = (k+1)/W for k < W, the peak at update W-1 (this "
                                       "project; one update ahead of transformers'); 'transformers' = k/W for k < W "
                                       "(transformers' get_constant_schedule_with_warmup / "
                                       "get_cosine_schedule_with_warmup); 'linear' / 'log' = DeepSpeed's WarmupLR / "
                                       "WarmupCosineLR warmup_type as DeepSpeed's engine steps them (the official "
                                       "code sets linear: train_configs/stage{1,2,3}/zero_*.json): update 0 at 0 "
                                       "(WarmupLR: at train.warmup_min_ratio), update k <= W at (k-1)/W (log: "
                                       "ln(k)/ln(W)), the peak from update W+1 on (one update behind "
                                       "transformers'), W at least 2 (DeepSpeed's floor; needs warmup_steps >= 1). "
                                       "Each ramp runs from train.warmup_min_ratio to 1. Proven equal to each "
                                       "library: tests/harness/training/test_lr_schedule.py.")
    warmup_min_ratio: float = knob(0.0, "Where the warm-up starts, a fraction of train.lr in [0, 1] (DeepSpeed "
                                        "WarmupCosineLR warmup_min_ratio, WarmupLR warmup_min_lr / lr; the official "
                                        "configs: 0, train_configs/stage{1,2,3}/zero_*.json).")
    cos_min_ratio: float = knob(0.0, "Floor of train.scheduler=warmup_cosine, a fraction of train.lr in [0, 1] "
                                     "(DeepSpeed WarmupCosineLR cos_min_ratio, whose own default is 1e-4): the "
                                     "official stage 1 sets 0.001 on MIMIC-CXR and 1.0 (no decay: flat after the "
                                     "warm-up) on IU-Xray (train_configs/stage1/zero_{mimic,iuxray}_stage1.json). "
                                     "0 = to 0, as scheduler=cosine.")
    cosine_total_steps: int | None = knob(None, "Optimizer step at which scheduler cosine / warmup_cosine reaches "
                                                "its floor, where it then stays (DeepSpeed WarmupCosineLR "
                                                "total_num_steps: the official stage 1 states 84,622 on MIMIC-CXR "
                                                "and 192 on IU-Xray, train_configs/stage1/zero_*_stage1.json); "
                                                "null = the stage's own number of optimizer steps (this project). "
                                                "A count, like train.warmup_steps: the paper presets state the "
                                                "official counts, which hold for the full training set at the "
                                                "preset's batch size.")
    grad_clip: float = knob(1.0, "Gradient-norm clip, >= 0.")
    micro_batch_size: int | None = knob(None, "Samples per forward/backward pass in warm-up and SFT (gradient "
                                              "accumulation up to each process's share of batch_size; the step "
                                              "equals the one-pass step). null = the whole share in one pass "
                                              "(this project).")
    num_workers: int = knob(0, "DataLoader worker processes that decode images and encode the batches of warm-up "
                               "and SFT ahead of the model (pinned memory on CUDA); 0 = in the training process "
                               "(this project, issue 14). The batches and their order do not depend on it, so it is "
                               "not part of a run's key.")
    max_steps: int | None = knob(None, "Stop after this many optimizer steps (null = run all epochs).")
    checkpoint_every: int = knob(50, "Checkpoint every k optimizer steps (0 = only at the end); a rerun of the "
                                     "same command resumes from it.")
    dist_timeout_s: float = knob(1800.0, "Timeout of the training collectives under a torchrun / accelerate "
                                         "launch (harness/parallel/distributed.py; this project), seconds; not part of "
                                         "a run's key.")
    dist_load_timeout_s: float = knob(86400.0, "How long the other processes wait while rank 0 loads first (stage 0, "
                                               "data checks, the model) under a launch (this project), seconds; not "
                                               "part of a run's key.")
    report_to: str | list[str] = knob("tensorboard", "Trackers the run's records are mirrored into, for warm-up, "
                                                     "classifier, SFT, RL and stage 0 (harness/runs/trackers.py): "
                                                     "tensorboard (RUN/tb/; a study's stage run: "
                                                     "<study>/tb/<arm>/seed<k>/<stage>), wandb (Weights & "
                                                     "Biases, files in RUN/wandb/; WANDB_MODE=offline keeps it "
                                                     "on disk), none, or a list, e.g. [tensorboard, wandb]. "
                                                     "The same keys as steps.jsonl / evals.jsonl; RL's "
                                                     "validation completions as a table (this project, as "
                                                     "TRL's report_to). Not part of a run's key.")
    wandb_project: str = knob("regbench", "W&B project of train.report_to=wandb (this project); not part of a "
                                          "run's key.")
    preempt_signals: list[str] = knob(default_factory=lambda: ["SIGTERM", "SIGUSR1"], help=(
        "Signals that make a stage (warm-up, classifier, SFT, RL, stage 0) finish its current step, write a "
        "checkpoint and exit with status 75 (requeue), as Slurm sends before it stops or requeues a job "
        "(harness/runs/preemption.py; this project, issue 26); [] = none (the signal's default action). Not part "
        "of a run's key."))
    handoff: str = knob("last", "Which weights a warm-up or SFT stage hands on as its `model/` (what the next "
                                "stage's init_from loads): \"last\" = after the last step (this project's default); "
                                "\"best_val\" = the epoch with the highest validation score, as the official code "
                                "hands on checkpoint_best.pth (reva_po/runners/runner_base.py: validation on the "
                                "'val' split after every epoch, kept when agg_metrics beats the best so far, "
                                "strictly). The score is RL's s_val (harness/grpo/validation.py: rl.val_score, "
                                "rl.val_lambda, rl.val_rg_metric of this stage's config; official agg_metrics = "
                                "mean(BLEU-1..4, METEOR, ROUGE-L) + 0.1 RadGraph F1, "
                                "reva_po/tasks/report_generation.py compute_metrics = rl.val_score official, "
                                "val_lambda 0.1, val_rg_metric radgraph) of greedy reports decoded with the "
                                "generation section, on the whole validation split. The last epoch's model is "
                                "kept too, in `model_last/`; evals.jsonl holds each epoch's scores and "
                                "metrics.json the chosen epoch. Ignored by RL (rl.select) and stage 0.")
    deepspeed: str = knob("", "DeepSpeed config JSON (e.g. experiments/deepspeed/zero1.json) for warm-up, SFT and RL "
                              "under a launch: ZeRO-1/2 through accelerate's DeepSpeedPlugin "
                              "(harness/parallel/zero.py; the paper trains with DeepSpeed ZeRO-1, Supp. D.2); its "
                              "gradient_clipping is set to train.grad_clip. Empty = DDP (this project).")


@dataclass
class PretrainConfig(StepConfig):
    """Stage 0, tiny preset only: a full-parameter pretrain that stands in for the pretrained LVLM.

    It uses its own synthetic set (a different seed from the task data) so that stages 1-2 still have work.
    The result is cached under `cache_dir` by a hash of this section and the tiny model sizes. Its schedule is
    cosine (StepConfig's fields with stage 0's defaults; harness/stages/pretrain.py).
    """

    n: int = knob(2000, "Studies in stage 0's own synthetic set, >= 1.")
    data_seed: int = knob(1000, "Seed of stage 0's synthetic set (not the task data's).")
    epochs: float = redefault(StepConfig, "epochs", 8.0)
    batch_size: int = redefault(StepConfig, "batch_size", 32)
    lr: float = redefault(StepConfig, "lr", 3e-3)
    weight_decay: float = redefault(StepConfig, "weight_decay", 0.01)
    warmup_steps: int = redefault(StepConfig, "warmup_steps", 20)
    findings_task_fraction: float = knob(1.0, 'Share of extra "list the findings" examples mixed into stage 0 (a '
                                              "stand-in for the visual question answering a real LVLM is "
                                              "pretrained on; it makes the base look at the image). 0 = reports "
                                              "only.")
    hint_task_fraction: float = knob(1.0, "Share of extra report examples whose instruction names (noisy) "
                                          "findings, in stage 2's prompt format.")
    patch_embed: str = knob("conv", 'How the tiny base computes its vision patch embedding: "conv" = transformers\' '
                                    'Conv3d; "matmul" = the same linear map as one matrix product (equal to float '
                                    "rounding; forward + weight gradient in 0.39x the time on a CPU core, a stage-0 "
                                    "step in 0.91-0.97x: benchmarks/bench_patch_embed.py; "
                                    "harness/models/patch_embed.py). Saved with the base, so every stage that loads "
                                    "it computes the same way. The tiny preset files set matmul (issue 27).")

    def train_config(self) -> TrainConfig:
        """The TrainConfig of stage 0's loop: these fields, a cosine schedule, checkpoints every 50 steps."""
        return TrainConfig(**{f.name: getattr(self, f.name) for f in fields(StepConfig)}, scheduler="cosine",
                           checkpoint_every=50)
