"""Whole GRPO step: regbench's `GRPOTrainer.train_step` vs TRL's `GRPOTrainer`, interleaved (issue 15; goal <= 0.5x).

TRL is a test-only dependency (pyproject.toml's `dev` extra: trl 1.16.0 with datasets 5.x, beside the project's
transformers 5.20.2), installed in `.venv` by `make test`; never imported by the package. From the worktree root:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_vs_trl.py --steps 40

Both sides: the same tiny Qwen2.5-VL (tiny preset, built like benchmarks/bench_rl_step.py), saved with
save_pretrained and loaded from that folder by each side with attn_implementation sdpa (--attn; transformers'
default for a loaded model); LoRA r = 32 on every linear layer + the merger trained
(harness.models.trainable.add_lora + set_trainable("rl"): the same trainable parameters) with LoRA dropout 0 on
both sides (--lora-dropout; issue 46: regbench's passes run in eval mode, rl.policy_dropout false, while TRL's
training pass runs in train mode, so before issue 46 TRL's step drew the model's 0.1 dropout and regbench's did
not; `--lora-dropout 0.1` is that old setting); 4 prompts x G = 4
candidates of synthetic chest X-rays; exactly 48 new tokens (min = max new tokens); T 0.7, top-p 0.9, top-k off,
repetition penalty 1.03, vision/control tokens suppressed (harness.prompting.batching.NEVER_GENERATE, as regbench does);
reward BLEU-4 (rewards.registry, the same function for both); constant KL beta 0.1 (k3) against a frozen reference;
clip 0.2 / 0.28; token-mean (DAPO) aggregation; group-std advantages; AdamW, lr 3e-6, constant schedule; one
optimizer step per generation (TRL num_iterations = 1; regbench rl.old_sync_every = 1, so old = current and neither
side runs an old-policy pass); one torch thread. regbench decodes with its default generation.backend (lean;
--backend hf for transformers' generate, --backend fused for the faster sampler of issue 27; --lora-pass merged for
its log-prob passes with each LoRA layer as one product, harness/models/merged_lora.py; --prompt-pass shared for
its log-prob passes with each group's prompt computed once, harness/grpo/shared_prompt.py; --no-feature-memo: its
reference passes encode every image again, as before the frozen passes' feature memo); TRL uses
transformers' `generate` (its path without vLLM). The policy
handed to TRL is a transformers model with LoRA layers injected (not a PeftModel), so TRL loads its reference as a
second copy of the saved model (no LoRA); regbench's reference is a snapshot of the starting policy swapped into
the one model: one forward pass each.

Steps alternate: TRL runs its training loop, and a callback at the end of every TRL step runs one regbench
step, so both see the same machine load. TRL's step time is the wall time between two such callbacks minus
the regbench step run inside (its dataloader and logging included, as a step of its loop costs them).
Printed: median step time of each and the ratio, and a breakdown (generation, reward, frozen forward passes,
rest = current forward + loss + backward + optimizer + bookkeeping); then the same ratio in CPU time of the
process (time.process_time; with one torch thread it moves less than wall time when other work shares the cores).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PARTS = ("generate", "reward", "frozen_fwd", "rest")
BETA = 0.1


def _timed_method(obj, name: str, bucket: dict, key: str, when=lambda: True):
    """Replace obj.name (on the instance) by a version that adds its wall time to bucket[key] when `when()`."""
    original = getattr(obj, name)

    def wrapper(*a, **k):
        if not when():
            return original(*a, **k)
        t0 = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            bucket[key] = bucket.get(key, 0.0) + time.perf_counter() - t0

    setattr(obj, name, wrapper)


def load_policy(model_dir: Path, lora_dropout: float | None = None, attn: str = "sdpa"):
    """The saved tiny model, LoRA r = 32 + merger trainable (regbench's stage-'rl' setting); lora_dropout None =
    model.lora_dropout's default (0.1), attn = transformers' attn_implementation."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from harness.config import ModelConfig
    from harness.models.trainable import add_lora, set_trainable

    m = ModelConfig()
    dropout = m.lora_dropout if lora_dropout is None else lora_dropout
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, attn_implementation=attn)
    model = add_lora(model, r=m.lora_r, alpha=m.lora_alpha, dropout=dropout)
    set_trainable(model, "rl")
    return model


def pass_bench_args(description: str, rounds: int, argv: list[str] | None) -> argparse.Namespace:
    """The arguments of the benchmarks that time one pass on one rollout of this trainer (bench_feature_memo.py,
    bench_shared_prompt.py): the step's shape, the measured passes per side, the seed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (B)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=rounds, help="measured passes per side")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.prompts, args.group_size, args.max_new_tokens, args.rounds) < 1:
        parser.error("--prompts, --group-size, --max-new-tokens and --rounds must be >= 1")
    args.backend, args.lora_pass, args.prompt_pass = "lean", "peft", "per_row"
    return args


@contextlib.contextmanager
def saved_regbench_trainer(args: argparse.Namespace):
    """regbench's trainer of this benchmark on the tiny model saved to and loaded from a temporary folder, one
    torch thread, in eval mode (what the log-prob passes run in)."""
    import torch
    from bench_rl_step import build_model_and_processor, build_prompts

    from harness.config import ModelConfig

    torch.set_num_threads(1)
    prompts = build_prompts(args.prompts, ModelConfig().image_size, args.seed)
    model, processor, _ = build_model_and_processor(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "tiny"
        model.save_pretrained(model_dir)
        processor.save_pretrained(model_dir)
        trainer = regbench_trainer(model_dir, processor, prompts, args, Path(tmp) / "run")
        trainer.model.eval()
        yield trainer


def regbench_trainer(model_dir: Path, processor, prompts, args, run_dir: Path):
    from harness.config import GenerationConfig, RLConfig, TrainConfig
    from harness.grpo.trainer import GRPOTrainer
    from harness.runs.records import RunDir

    rl = RLConfig(regularizer="constant", beta_base=BETA, reference="static", reward="bleu4",
                  group_size=args.group_size, prompts_per_step=args.prompts, max_new_tokens=args.max_new_tokens,
                  min_new_tokens=args.max_new_tokens, old_sync_every=1, old_sync="global", samples_every=0,
                  eps_low=0.2, eps_high=0.28, aggregation="token_mean", advantage_scale="std",
                  lora_pass=args.lora_pass, prompt_pass=args.prompt_pass)
    tc = TrainConfig(epochs=1000, lr=3e-6, scheduler="constant", weight_decay=1e-3)
    policy = load_policy(model_dir, getattr(args, "lora_dropout", None), getattr(args, "attn", "sdpa"))
    trainer = GRPOTrainer(policy, processor, rl, tc, RunDir(run_dir), prompts, None, seed=args.seed,
                          progress=False, generation=GenerationConfig(backend=args.backend))
    trainer.reference.on_start(trainer.store)
    trainer.store.capture("old")
    if getattr(args, "no_feature_memo", False):  # every reference pass encodes its images (before issue 27's memo)
        trainer.frozen_features.memo = lambda name, version: None
    return trainer


def trl_trainer(model_dir: Path, processor, prompts, args, out_dir: Path, callback):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from harness.prompting.batching import suppressed_token_ids
    from rewards.spec import compute_reward

    tok = processor.tokenizer

    def bleu4(completions, report, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [float(r) for r in compute_reward("bleu4", [t.strip() for t in texts], list(report))]

    rows = {"prompt": [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ins}]}]
                       for ins in prompts.instructions],
            "image": [views[0] for views in prompts.images], "report": list(prompts.references)}
    cfg = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=args.prompts * args.group_size,
        num_generations=args.group_size, gradient_accumulation_steps=1, num_iterations=1,
        max_completion_length=args.max_new_tokens, temperature=0.7, top_p=0.9, top_k=0, repetition_penalty=1.03,
        generation_kwargs={"min_new_tokens": args.max_new_tokens, "suppress_tokens": suppressed_token_ids(tok)},
        beta=BETA, epsilon=0.2, epsilon_high=0.28,
        loss_type="dapo", scale_rewards="group", learning_rate=3e-6, lr_scheduler_type="constant",
        weight_decay=1e-3, max_grad_norm=1.0, max_steps=args.warmup + args.steps, logging_steps=10**6,
        save_strategy="no", report_to="none", use_cpu=args.device == "cpu", bf16=False, seed=args.seed,
        dataloader_num_workers=0, disable_tqdm=True, log_completions=False, remove_unused_columns=False,
    )
    return GRPOTrainer(model=load_policy(model_dir, args.lora_dropout, args.attn), reward_funcs=bleu4, args=cfg,
                       train_dataset=Dataset.from_dict(rows), processing_class=processor, callbacks=[callback])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="measured steps per system")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps per system (not measured)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--n-prompts", type=int, default=32, help="size of the synthetic prompt set")
    parser.add_argument("--backend", default="lean", choices=["lean", "fused", "hf"],
                        help="regbench's generation.backend (fused: harness/sampling/fused_step.py, not token-exact)")
    parser.add_argument("--lora-pass", default="peft", choices=["peft", "merged"],
                        help="regbench's rl.lora_pass (merged: harness/models/merged_lora.py, not bit-identical)")
    parser.add_argument("--prompt-pass", default="per_row", choices=["per_row", "shared"],
                        help="regbench's rl.prompt_pass (shared: harness/grpo/shared_prompt.py, not bit-identical)")
    parser.add_argument("--no-feature-memo", action="store_true",
                        help="regbench's reference passes encode every image (harness/sampling/feature_memo.py off)")
    parser.add_argument("--lora-dropout", type=float, default=0.0,
                        help="LoRA dropout of both policies (0: like for like, issue 46; regbench's passes run in "
                             "eval mode either way, rl.policy_dropout false, so 0.1 = the setting before issue 46, "
                             "where only TRL's training pass drew dropout)")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"],
                        help="attn_implementation of both policies (TRL builds its reference with the policy's)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0 <= args.lora_dropout < 1:
        parser.error(f"--lora-dropout {args.lora_dropout}: must be in [0, 1)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import torch
    import trl
    from bench_rl_step import build_model_and_processor, build_prompts
    from transformers import TrainerCallback

    import harness.grpo.reward as rb_module  # the run's reward calls call_reward (harness/grpo/reward.py)
    from harness.config import ModelConfig

    torch.set_num_threads(args.threads)
    prompts = build_prompts(args.n_prompts, ModelConfig().image_size, args.seed)
    model, processor, _ = build_model_and_processor(args.seed)
    rb_parts: dict = {}
    trl_parts: dict = {}
    times: dict = {"regbench": [], "trl": []}
    cpu_times: dict = {"regbench": [], "trl": []}  # process CPU time: less moved by other work on the machine
    parts: dict = {"regbench": {p: [] for p in PARTS}, "trl": {p: [] for p in PARTS}}
    lengths: list = []

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "tiny"
        model.save_pretrained(model_dir)
        processor.save_pretrained(model_dir)
        del model
        rb = regbench_trainer(model_dir, processor, prompts, args, Path(tmp) / "rb")
        _timed_method(rb, "_rollout", rb_parts, "generate")
        _timed_method(rb, "_frozen_pass", rb_parts, "frozen_fwd")  # old / reference log-prob passes
        reward_fn = rb_module.call_reward

        def timed_reward(*a, **k):
            t0 = time.perf_counter()
            try:
                return reward_fn(*a, **k)
            finally:
                rb_parts["reward"] = rb_parts.get("reward", 0.0) + time.perf_counter() - t0

        rb_module.call_reward = timed_reward

        def record(system: str, total: float, cpu: float, bucket: dict) -> None:
            times[system].append(total)
            cpu_times[system].append(cpu)
            for p in PARTS[:-1]:
                parts[system][p].append(bucket.get(p, 0.0))
            parts[system]["rest"].append(total - sum(bucket.get(p, 0.0) for p in PARTS[:-1]))

        class Interleave(TrainerCallback):
            mark = None

            def on_train_begin(self, *_, **__):
                self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

            def on_step_end(self, a, state, control, **kw):
                trl_total, trl_cpu = time.perf_counter() - self.mark, time.process_time() - self.cpu_mark
                measured = state.global_step > args.warmup
                if measured:
                    record("trl", trl_total, trl_cpu, trl_parts)
                trl_parts.clear()
                rb_parts.clear()
                t0, c0 = time.perf_counter(), time.process_time()
                rb.train_step()
                if measured:
                    record("regbench", time.perf_counter() - t0, time.process_time() - c0, rb_parts)
                rb_parts.clear()
                self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

        trainer = trl_trainer(model_dir, processor, prompts, args, Path(tmp) / "trl", Interleave())
        _timed_method(trainer, "_generate_single_turn", trl_parts, "generate")
        _timed_method(trainer, "_calculate_rewards", trl_parts, "reward")
        _timed_method(trainer, "_get_per_token_logps_and_entropies", trl_parts, "frozen_fwd",
                      when=lambda: not torch.is_grad_enabled())
        generate_single_turn = trainer._generate_single_turn

        def check_lengths(*a, **k):
            out = generate_single_turn(*a, **k)
            lengths.extend(len(c) for c in out[0])
            return out

        trainer._generate_single_turn = check_lengths
        trainer.train()
        rb_module.call_reward = reward_fn

    if set(lengths) != {args.max_new_tokens}:
        print(f"TRL completions were not all {args.max_new_tokens} tokens: {sorted(set(lengths))}", file=sys.stderr)
        return 1
    print(f"{args.prompts} prompts x G={args.group_size}, {args.max_new_tokens} new tokens, {args.steps} measured "
          f"steps each after {args.warmup} warm-up, interleaved; {args.threads} thread(s), {args.device}; "
          f"torch {torch.__version__}, trl {trl.__version__}, {platform.machine()}; regbench backend {args.backend}, "
          f"lora_pass {args.lora_pass}, prompt_pass {args.prompt_pass}, "
          f"feature memo {'off' if args.no_feature_memo else 'on'}; both sides: attn {args.attn}, LoRA dropout "
          f"{args.lora_dropout:g} (TRL's training pass in train mode, regbench's passes in eval mode"
          f"{': unlike' if args.lora_dropout else ''})")
    print(f"{'system':9s} {'median':>8s} {'min':>8s} " + " ".join(f"{p:>10s}" for p in PARTS)
          + "   (ms; parts are medians)")
    med = {}
    for s in ("regbench", "trl"):
        med[s] = statistics.median(times[s])
        print(f"{s:9s} {med[s] * 1e3:8.1f} {min(times[s]) * 1e3:8.1f} "
              + " ".join(f"{statistics.median(parts[s][p]) * 1e3:10.1f}" for p in PARTS))
    paired = [a / b for a, b in zip(times["regbench"], times["trl"], strict=True)]
    print(f"regbench / TRL: ratio of medians {med['regbench'] / med['trl']:.3f}, median of paired ratios "
          f"{statistics.median(paired):.3f} (goal <= 0.5)")
    cpu = {s: statistics.median(cpu_times[s]) for s in ("regbench", "trl")}
    paired_cpu = [a / b for a, b in zip(cpu_times["regbench"], cpu_times["trl"], strict=True)]
    print(f"CPU time of the process per step (medians, ms): regbench {cpu['regbench'] * 1e3:.1f}, TRL "
          f"{cpu['trl'] * 1e3:.1f}; ratio of medians {cpu['regbench'] / cpu['trl']:.3f}, median of paired ratios "
          f"{statistics.median(paired_cpu):.3f} (steadier than wall time on a loaded machine)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
