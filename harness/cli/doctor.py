"""`regbench doctor`: what this machine has for regbench, offline (nothing is downloaded or asked of a hub).

GPUs and their memory, the versions of the pinned packages, Java (METEOR), which weights are present (the Qwen
base of each real preset, CheXbert, RadGraph, the disease classifier), which presets can run here, and what each
stage of the given config or experiments preset will need and whether it is here (harness/checks/needs.py: the checks
preflight refuses a command with).
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.checks.memory_plan import memory_plan
from harness.checks.needs import problem, stage_needs
from harness.config import load_config
from harness.config.loading import load_yaml
from harness.config.presets import PRESETS, get_preset
from harness.experiments.resources import check_resources
from rewards.chexbert import check_chexbert_files
from rewards.radgraph import check_radgraph_files

# The pins of pyproject.toml (docs/running.md, "Pinned versions and why"); "" = any version, "X.Y.*" = any X.Y
# release (torch/torchvision: `make install` puts in 2.14.1/0.29.1, the `vllm` extra 2.14.0/0.29.0).
PINNED = {
    "torch": "2.14.*", "torchvision": "0.29.*", "transformers": "5.20.2", "peft": "0.21.2",
    "accelerate": "1.15.0", "timm": "1.0.31", "scikit-learn": "1.7.2", "optuna": "5.0.0",
    "pycocoevalcap": "1.2", "radgraph": "0.1.18", "f1chexbert": "0.0.2", "deepspeed": "0.19.8",
}
# Parameters of the real presets' models (Hugging Face model cards: 3.75B and 8.29B); the keys name the presets
# the report checks.
PARAMS = {"qwen2.5-vl-3b": 3.75e9, "qwen2.5-vl-7b": 8.29e9}
# The paper preset whose memory plan (harness/checks/memory_plan.py: its largest warm-up / SFT / RL stage per GPU, plus
# the plan's margin) is each model preset's need of GPU memory (issue 43: the former floor, 1.5 x the bf16 base,
# was not the RL step's need).
NEED_PRESETS = {"qwen2.5-vl-3b": "mimic-qwen2.5vl-3b.yaml", "qwen2.5-vl-7b": "mimic-qwen2.5vl-7b.yaml"}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    gpus: list[dict] = field(default_factory=list)
    packages: list[Check] = field(default_factory=list)
    tools: list[Check] = field(default_factory=list)
    weights: list[Check] = field(default_factory=list)
    presets: list[Check] = field(default_factory=list)
    needs: list[Check] = field(default_factory=list)

    def as_dict(self) -> dict:
        def rows(checks):
            return [vars(c) for c in checks]

        return {"gpus": self.gpus, "packages": rows(self.packages), "tools": rows(self.tools),
                "weights": rows(self.weights), "presets": rows(self.presets), "needs": rows(self.needs)}


def gpus() -> list[dict]:
    # lazy: start-up cost (torch)
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        out.append({"index": i, "name": props.name, "total_gib": round(total / 2**30, 1),
                    "free_gib": round(free / 2**30, 1), "bf16": torch.cuda.is_bf16_supported(),
                    "capability": f"{props.major}.{props.minor}"})
    return out


def package_checks() -> list[Check]:
    out = []
    for name, pin in PINNED.items():
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out.append(Check(name, False, "not installed"))
            continue
        # Local builds add "+cpu" etc.; the pin is about the release.
        release = version.split("+")[0]
        ok = not pin or release == pin or (pin.endswith(".*") and release.startswith(pin[:-1]))
        out.append(Check(name, ok, version if ok else f"{version} (pinned {pin})"))
    return out


def tool_checks() -> list[Check]:
    java = shutil.which("java")
    return [Check("java", java is not None, java or "not found (METEOR needs Java)")]


def _hub_snapshot(repo_id: str) -> str | None:
    """The cached snapshot folder of a hub model, without network access; None if absent."""
    # lazy: start-up cost (transformers)
    from transformers.utils.hub import cached_file

    try:
        path = cached_file(repo_id, "config.json", local_files_only=True,
                           _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
    except OSError:
        return None
    return str(Path(path).parent) if path else None


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def base_location(preset_name: str, model_path: str | None) -> tuple[str | None, str]:
    """(folder, how it was found) of a real preset's base: `model.path` if given, else the hub cache."""

    preset = get_preset(preset_name)
    if model_path and Path(model_path).is_dir():
        folder = Path(model_path)
        if not (folder / "config.json").is_file():
            return None, f"{folder}: no config.json"
        if not _has_weights(folder):
            return None, f"{folder}: no *.safetensors / *.bin"
        return str(folder), f"model.path {folder}"
    repo = model_path if model_path and re.fullmatch(r"[\w.-]+/[\w.-]+", model_path) else preset.default_path
    snapshot = _hub_snapshot(repo)
    if snapshot and _has_weights(Path(snapshot)):
        return snapshot, f"{repo} in the Hugging Face cache ({snapshot})"
    return None, f"{repo}: not in the Hugging Face cache and no model.path folder"


def weight_checks(cfg) -> list[Check]:
    out = []
    for name in PARAMS:
        path = cfg.model.path if cfg.model.preset == name else None
        folder, detail = base_location(name, path)
        out.append(Check(f"base {name}", folder is not None, detail))
    for label, check, arg in (("CheXbert", check_chexbert_files, None),
                              ("RadGraph " + cfg.eval.radgraph_model, check_radgraph_files, cfg.eval.radgraph_model)):
        try:
            where = check(arg) if arg else check()
            out.append(Check(label, True, str(where)))
        except FileNotFoundError as e:
            out.append(Check(label, False, str(e)))
        except Exception as e:  # a broken install must not stop the rest of the report
            out.append(Check(label, False, f"{type(e).__name__}: {e}"))
    out.append(_classifier_check(cfg))
    return out


def _classifier_check(cfg) -> Check:
    # lazy: start-up cost (torch)
    from harness.models.classifier import META_FILE, WEIGHTS_FILE

    c = cfg.classifier
    if c.dir:
        missing = [n for n in (META_FILE, WEIGHTS_FILE) if not (Path(c.dir) / n).is_file()]
        return Check("classifier", not missing,
                     f"{c.dir}" if not missing else f"{c.dir}: missing {', '.join(missing)}")
    if c.pretrained_path:
        ok = Path(c.pretrained_path).is_file() or (Path(c.pretrained_path) / WEIGHTS_FILE).is_file()
        return Check("classifier", ok, f"pretrained_path {c.pretrained_path}" + ("" if ok else " not found"))
    return Check("classifier", True, "none set (classifier.dir / classifier.pretrained_path); "
                                     "`regbench classifier train` builds one")


def preset_checks(cfg, gpu_list: list[dict], weights: list[Check]) -> list[Check]:
    out = [Check("tiny", True, "runs anywhere (CPU; stage 0 builds the base)")]
    found = {c.name: c.ok for c in weights}
    for name in PARAMS:
        preset = PRESETS[name]
        need = planned_need(name)
        fits = [g for g in gpu_list if g["total_gib"] >= need and (preset.dtype != "bfloat16" or g["bf16"])]
        reasons = []
        if not found.get(f"base {name}"):
            reasons.append("base weights missing")
        if not fits:
            reasons.append(f"no GPU with >= {need:.0f} GiB" + (" and bf16" if preset.dtype == "bfloat16" else ""))
        detail = (f"{len(fits)} GPU(s) with >= {need:.0f} GiB ({preset.dtype})" if not reasons
                  else "; ".join(reasons)) + f" (the memory plan of experiments/presets/{NEED_PRESETS[name]})"
        out.append(Check(name, not reasons, detail))
    return out


def planned_need(name: str) -> float:
    """GiB of GPU memory the paper preset of model preset `name` needs: its largest warm-up / SFT / RL total per
    GPU at its resources' process count, over (1 - PLAN_MARGIN)."""

    path = Path(__file__).resolve().parents[2] / "experiments" / "presets" / NEED_PRESETS[name]
    plans = preset_plans(str(path), [], load_yaml(path), None, DEFAULT_GPU_GIB, [], stages=("warmup", "sft", "rl"))
    return max(p["total"] for p in plans["stages"].values()) / (1 - PLAN_MARGIN)


# The stages whose needs the report lists: the pipeline's and the test evaluation.
DOCTOR_STAGES = ("warmup", "classifier", "sft", "rl", "eval")


def doctor_configs(config: str | None, overrides: list[str]) -> tuple[object, dict]:
    """(the config of the general sections, {stage: its resolved config}). An experiments preset (common / stages)
    is resolved for each stage, as its stage runs read it; any other config serves every stage (the general
    sections then read the RL stage's view of a preset, the stage that uses the most of it)."""

    preset = bool(config) and any(k in load_yaml(config) for k in ("common", "stages"))
    if not preset:
        cfg = load_config(config, overrides)
        return cfg, dict.fromkeys(DOCTOR_STAGES, cfg)
    stages = {stage: load_config(config, overrides, stage=stage) for stage in DOCTOR_STAGES}
    return stages["rl"], stages


def need_checks(stages: dict) -> list[Check]:
    """What each stage will need (harness/checks/needs.py: stage_needs) and whether it is here (`problem`:
    files only)."""

    out = []
    for stage, cfg in stages.items():
        for need in stage_needs(cfg, stage):
            asked = f"{need.key} = {need.value!r}" + ("" if need.required else ", optional: reported when present")
            if need.kind == "classifier_dir" and not need.target:  # an experiment sets it to its classifier run
                out.append(Check(f"{stage}: classifier folder", True, f"{asked}: written by the classifier stage "
                                 "(an experiment sets it; `regbench train sft` needs it set)"))
                continue
            detail = problem(need)
            text = f"{asked}: present" if detail is None else " ".join(detail.split())
            if detail is not None and not text.startswith(f"'{need.key}'"):  # preflight's messages name the key
                text = f"{asked}: {text}"
            out.append(Check(f"{stage}: {need.label}", detail is None, text))
    return out


def run_doctor(cfg, stages: dict | None = None) -> Report:
    """The report for `cfg`; `stages` ({stage: config}, default `cfg` for each) for the needs section."""
    report = Report(gpus=gpus(), packages=package_checks(), tools=tool_checks(), weights=weight_checks(cfg))
    report.presets = preset_checks(cfg, report.gpus, report.weights)
    report.needs = need_checks(stages if stages is not None else dict.fromkeys(DOCTOR_STAGES, cfg))
    return report


def format_report(report: Report) -> str:
    lines = ["GPUs:"]
    if not report.gpus:
        lines.append("  none (CUDA not available): the tiny preset runs on the CPU")
    for g in report.gpus:
        lines.append(f"  cuda:{g['index']} {g['name']}: {g['total_gib']} GiB ({g['free_gib']} free), "
                     f"compute {g['capability']}, bf16 {'yes' if g['bf16'] else 'no'}")
    for title, checks in (("Packages", report.packages), ("Tools", report.tools), ("Weights", report.weights),
                          ("Presets that can run here", report.presets),
                          ("Needed by each stage of this config (checked before a command runs)", report.needs)):
        lines.append(f"{title}:")
        lines.extend(f"  [{'ok' if c.ok else '--'}] {c.name}: {c.detail}" for c in checks)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# The memory plan of an experiments preset (harness/checks/memory_plan.py)

PLAN_STAGES = ("warmup", "sft", "rl", "classifier", "eval")
# An 80 GB A100 / H100 as torch reports it (torch.cuda.mem_get_info: 79.1 GiB on an H100 80GB HBM3).
DEFAULT_GPU_GIB = 79.1
# The plan must leave this share of the GPU free: the caching allocator's fragmentation and temporaries the
# activation model does not count (this project's margin).
PLAN_MARGIN = 0.10


def preset_plans(path: str, overrides: list[str], doc: dict, world_size: int | None, gpu_gib: float | None,
                 gpu_list: list[dict], stages: tuple[str, ...] = PLAN_STAGES) -> dict:
    """{"gpu_gib", "stages": {stage: plan + {"fits", "world_size"}}} for each stage of an experiments preset."""

    if gpu_gib is None:
        gpu_gib = min((g["total_gib"] for g in gpu_list), default=DEFAULT_GPU_GIB)
    resources = check_resources(doc.get("resources"), str(path))
    out = {"gpu_gib": gpu_gib, "margin": PLAN_MARGIN, "stages": {}}
    for stage in stages:
        cfg = load_config(path, overrides, stage=stage)
        if cfg.model.preset == "tiny":
            return {}
        res = resources[stage]
        world = world_size if world_size and stage in ("warmup", "sft", "rl") else max(1, res.gpus) * res.nodes
        plan = memory_plan(cfg, stage, world)
        plan["fits"] = plan["total"] <= gpu_gib * (1 - PLAN_MARGIN)
        out["stages"][stage] = plan
    return out


def format_plans(plans: dict) -> str:
    gib = plans["gpu_gib"]
    lines = [f"Memory plan per GPU (GiB; fits = total <= {1 - plans['margin']:.0%} of {gib:g} GiB; "
             "harness/checks/memory_plan.py):",
             f"  {'stage':<10} {'procs':>5} {'batch':>5} {'weights':>8} {'grads':>6} {'optim':>6} {'snaps':>6} "
             f"{'activ':>6} {'total':>6}  fits  notes"]
    for stage, p in plans["stages"].items():
        notes = []
        if stage in ("warmup", "sft", "rl"):
            notes.append(f"ZeRO-{p['zero']}" if p["zero"] else "DDP")
            notes.append("grad ckpt" if p["gradient_checkpointing"] else "no grad ckpt")
            notes.append(f"{p['prompt']}+{p['report']} tokens, {p['patches']} patches/sample")
            if p["lora_dropout"]:
                notes.append("LoRA dropout")
            notes.append(f"{p['trained_params'] / 1e6:.1f}M of {p['total_params'] / 1e9:.2f}B trained")
        elif stage == "eval":
            notes.append(f"KV cache of {p['batch']} x {p['prompt']}+max_new tokens")
        else:
            notes.append(f"{p['total_params'] / 1e6:.1f}M params, fp32")
        lines.append(f"  {stage:<10} {p['world_size']:>5} {p['batch']:>5} {p['weights']:>8.1f} {p['grads']:>6.1f} "
                     f"{p['optimizer']:>6.1f} {p['snapshots']:>6.1f} {p['activations']:>6.1f} {p['total']:>6.1f}  "
                     f"{'yes' if p['fits'] else 'NO ':<4}  {', '.join(notes)}")
    return "\n".join(lines)
