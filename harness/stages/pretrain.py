"""Stage 0 (tiny preset only): build and pretrain the tiny base model, cached on disk by config hash.

A randomly initialised LM with LoRA does not learn, so the tiny preset needs a base that already writes
reports, as Qwen2.5-VL does for real runs. Stage 0 trains every parameter of a fresh tiny Qwen2.5-VL on its
own synthetic image-report set (seed `pretrain.data_seed`, not the task data), with plain prompts (no disease
hints). The folder it writes has the same layout as a real Qwen2.5-VL checkpoint and loads through the same
code. It runs once per machine: a second call with the same settings returns the cached folder. Its seed is
`STAGE0_SEED`, not the run's: every run seed starts from the one base, as real runs start from one checkpoint.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from harness.config import RunConfig, to_dict
from harness.config.names import tracker_names
from harness.constants import OBSERVATIONS
from harness.data.datasets import load_annotation
from harness.models.tiny import build_processor, build_tiny_model, save_base, train_tokenizer
from harness.models.trainable import set_trainable
from harness.prompting.batching import instruction_text
from harness.runs import lock as runlock
from harness.runs.durable import fsync_tree, replace_dir, reporting_disk_full
from harness.runs.records import RunDir, atomic_write_json, atomic_write_text
from harness.runs.trackers import labels_beside, read_labels
from harness.stages import paths as stage_paths
from harness.stages.common import ensure_phantom, preemptible, seed_everything, torch_threads
from harness.stages.lm_train import LMData, train_lm
from harness.stages.paths import base_dir, pretrain_key  # noqa: F401 - re-exported: this stage's key and folder
from harness.stages.prompts import load_images

FINDINGS_INSTRUCTION = "List the findings."
# DataLoader worker processes that encode stage 0's next batch while this process trains. None: in the demo and
# the studies the classifier trains on the other core while stage 0 runs, and a loader process beside both
# oversubscribed the two cores (quiet demo, issue 27: stage 0 448 s with one worker vs 282 s without, the
# classifier 243 s vs 181 s beside it). The images are decoded once into the pixel cache, so what a worker
# would take off this process is the processor alone. The batches do not depend on it
# (harness/stages/lm_batches.py), so neither do the weights or the key.
LOADER_WORKERS = 0


def findings_answer(labels) -> str:
    """Short answer naming what a report states: positives, then 'possible' uncertain ones ("no finding")."""
    pos = [OBSERVATIONS[i].lower() for i in range(1, len(OBSERVATIONS)) if labels[i] == 1]
    unc = [f"possible {OBSERVATIONS[i].lower()}" for i in range(1, len(OBSERVATIONS)) if labels[i] == -1]
    names = pos + unc
    return ", ".join(names) if names else "no finding"


def with_findings_task(data: LMData, samples, fraction: float, seed: int) -> LMData:
    """Append `fraction * len(data)` "list the findings" examples (random samples, seeded)."""
    k = int(round(fraction * len(samples)))
    if k <= 0:
        return data
    picks = random.Random(seed).sample(range(len(samples)), min(k, len(samples)))
    picks = [i for i in picks if samples[i].labels is not None]
    return LMData(data.images + [data.images[i] for i in picks],
                  data.instructions + [FINDINGS_INSTRUCTION] * len(picks),
                  data.reports + [findings_answer(samples[i].labels) for i in picks])


def noisy_hint_names(labels, rng, keep: float = 0.8, false_rate: float = 0.05) -> list[str]:
    """Observation names as an imperfect classifier would suggest them: each stated positive kept with
    probability `keep`, each other observation added with probability `false_rate`."""
    names = []
    for i in range(1, len(OBSERVATIONS)):
        if (labels[i] == 1 and rng.random() < keep) or (labels[i] != 1 and rng.random() < false_rate):
            names.append(OBSERVATIONS[i])
    return names


def with_hint_task(data: LMData, samples, fraction: float, seed: int, instruction: str, template: str,
                   list_format: str = "comma", separator: str = " ") -> LMData:
    """Append report examples whose instruction carries noisy disease hints (stage 2's prompt format).

    A real LVLM already follows instructions that name findings; the tiny base learns it here, from hints
    that are right most of the time but not always, so it still has to look at the image.
    """
    k = int(round(fraction * len(samples)))
    if k <= 0:
        return data
    rng = random.Random(seed + 1)
    picks = [i for i in rng.sample(range(len(samples)), min(k, len(samples))) if samples[i].labels is not None]
    hints = [instruction_text(instruction, noisy_hint_names(samples[i].labels, rng), template, list_format, separator)
             for i in picks]
    return LMData(data.images + [data.images[i] for i in picks], data.instructions + hints,
                  data.reports + [samples[i].report for i in picks])


def build_base(cfg: RunConfig, progress: bool = True) -> Path:
    """Stage 0 as a named step (the experiment runner's `pretrain` node, and the stage start before the model
    loads): the cached tiny base of `cfg`, built first if need be, with a line saying which."""
    out = base_dir(cfg)
    if (out / "DONE").is_file():
        print(f"[stage 0] tiny base model: cached in {out}", flush=True)
        return out
    print(f"[stage 0] building the tiny base model (once per machine and config) into {out}", flush=True)
    return pretrain_tiny_base(cfg, progress=progress)


@preemptible
def pretrain_tiny_base(cfg: RunConfig, progress: bool = True, force: bool = False) -> Path:
    """Return the cached tiny base folder, building it first if needed."""
    if cfg.model.preset != "tiny":
        raise ValueError(f"stage 0 (pretrain) is for the tiny preset only, not '{cfg.model.preset}'")

    out = base_dir(cfg)
    if (out / "DONE").is_file() and not force:
        return out
    # One build per cache entry at a time: a second process waits for the first, then finds it done.
    lock = out.parent / f"{out.name}.lock"
    runlock.acquire_file(lock, wait_s=BUILD_WAIT_S)
    try:
        if (out / "DONE").is_file() and not force:
            return out
        return _build_tiny_base(cfg, out, progress)
    finally:
        runlock.release_file(lock)


# How long a stage-0 build waits for another process building the same base (it takes minutes on 2 cores).
BUILD_WAIT_S = 3 * 3600.0


def stage0_run(cfg: RunConfig, path: Path, out: Path) -> RunDir:
    """Stage 0's records, mirrored into the trackers of `train.report_to` like every stage's: named `stage0/<base
    key>`, with a study's labels when the experiment runner wrote them beside the base (harness/experiments/
    tracker_labels.py)."""
    info = {"stage": "pretrain", "config": to_dict(cfg), "project": cfg.train.wandb_project,
            "name": f"stage0/{out.name}", **read_labels(path, labels_beside(out))}
    return RunDir(path, trackers=tracker_names(cfg.train.report_to), tracker_info=info)


def _build_tiny_base(cfg: RunConfig, out: Path, progress: bool) -> Path:
    p = cfg.pretrain
    seed_everything(stage_paths.STAGE0_SEED)
    work = out.parent / f"{out.name}.work"
    # Only the splits stage 0 reads: its train and val studies are those of the whole set (a study depends only
    # on its seed and index), and the 400 test studies of a 2,000-study set were drawn for nothing.
    data_ann = ensure_phantom(work / "data", p.n, p.data_seed, cfg.data.synth_image_size, progress,
                              splits=("train", "val"))
    splits = load_annotation(data_ann, "phantom")
    train, val = splits["train"], splits["val"]
    corpus = [s.report for s in train] + [cfg.prompt.instruction] + [o.lower() for o in OBSERVATIONS]
    tokenizer = train_tokenizer(corpus, cfg.model.tiny_vocab_size)
    processor = build_processor(tokenizer, cfg.model.image_size)
    model = build_tiny_model(tokenizer, seed=stage_paths.STAGE0_SEED,
                             attn_implementation=cfg.model.attn_implementation, patch_embed=p.patch_embed,
                             text_hidden=cfg.model.tiny_text_hidden,
                             text_layers=cfg.model.tiny_text_layers, vision_hidden=cfg.model.tiny_vision_hidden,
                             vision_depth=cfg.model.tiny_vision_depth, image_size=cfg.model.image_size)
    set_trainable(model, "pretrain")
    size = cfg.model.image_size
    train_data = with_findings_task(
        # decoded once into a uint8 file in the work folder (removed with it), not once per epoch
        LMData(load_images(train, size, cache_dir=work / "pixels"), [cfg.prompt.instruction] * len(train),
               [s.report for s in train]),
        train, p.findings_task_fraction, stage_paths.STAGE0_SEED)
    train_data = with_hint_task(train_data, train, p.hint_task_fraction, stage_paths.STAGE0_SEED,
                                cfg.prompt.instruction, cfg.prompt.disease_template, cfg.prompt.disease_list_format,
                                cfg.prompt.disease_separator)
    val_data = LMData(load_images(val, size, cache_dir=work / "pixels"), [cfg.prompt.instruction] * len(val),
                      [s.report for s in val])
    tcfg = p.train_config()
    tcfg.num_workers = LOADER_WORKERS
    run = stage0_run(cfg, work / "run", out)
    # The cached base must not depend on which command built it first: the weights depend on the thread
    # count, so stage 0 always trains on one thread (as in the experiment runner's worker processes).
    with torch_threads(1):
        metrics = train_lm(model, processor, train_data, val_data, tcfg, run, seed=stage_paths.STAGE0_SEED,
                           max_report_tokens=cfg.prompt.max_report_tokens, desc="stage 0 pretrain",
                           progress=progress)
    run.close()  # the trackers: their files are in the run folder copied below (TensorBoard: or the study's tb/)
    staging = out.parent / f"{out.name}.staging"
    if staging.exists():
        shutil.rmtree(staging)
    with reporting_disk_full(staging, "the stage-0 base model", None, cleanup=[staging]):
        save_base(model, processor, staging)
        atomic_write_json(staging / "pretrain_metrics.json", metrics)
        atomic_write_text(staging / "DONE", pretrain_key(cfg) + "\n")  # last: the folder is complete
        fsync_tree(staging)  # every file on disk before the folder is renamed into place
        replace_dir(staging, out)
    shutil.copytree(run.path, out / "run", dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return out
