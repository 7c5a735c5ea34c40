"""`regbench analyze {reward-variance,sign-alignment} RUN`: REVA-PO Supp. A.1 / A.3 on an RL run.

For the policy before RL (the run's starting checkpoint, `init_from` in its manifest) and after RL (its
final `model/`), sample `group_size` (G = 4) candidates per validation prompt with
`harness.grpo.rollout.sample_rollout` (the run's own rollout settings: temperature, top-p, top-k, token
limits, repetition penalty; prompts built as in its RL stage, classifier diseases included when the
checkpoint records a classifier), score every candidate with the reward registry and write
`analysis_<kind>.json` into the run directory:

  reward-variance  rewards bleu4, chexpert_f1 and radgraph_f1 (when its weights are present; else the
                   offline entity_f1, named as such); stats = per reward `within_group_std_summary`
  sign-alignment   rewards bleu4 and chexpert_f1; stats = `sign_alignment` (P_sign, P_top1; reports/analyses.py)

The JSON also holds the candidates and the per-group rewards ([B][G] per reward), so that the reports can
recompute anything from it. Sampling is seeded (`seed`): the same run, seed and prompts give the same file.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from reports.analyses import sign_alignment, within_group_std_summary

KINDS = ("reward-variance", "sign-alignment")


def analysis_rewards(kind: str) -> list[str]:
    if kind == "sign-alignment":
        return ["bleu4", "chexpert_f1"]
    if kind != "reward-variance":
        raise ValueError(f"unknown analysis '{kind}'; choose from {', '.join(KINDS)}")
    from rewards.radgraph import radgraph_available

    return ["bleu4", "chexpert_f1", "radgraph_f1" if radgraph_available() else "entity_f1"]


def analysis_stats(kind: str, rewards: dict[str, np.ndarray]) -> dict:
    if kind == "sign-alignment":
        return sign_alignment(rewards["bleu4"], rewards["chexpert_f1"])
    return {name: within_group_std_summary(r) for name, r in rewards.items()}


def _run_config(run_dir: Path):
    from harness.config import RunConfig, from_dict
    from harness.records import read_json

    manifest = read_json(run_dir / "manifest.json")
    if manifest.get("stage") not in (None, "rl"):
        raise ValueError(f"{run_dir}: stage '{manifest.get('stage')}', expected an RL run")
    return from_dict(RunConfig, manifest["config"], source=str(run_dir / "manifest.json"))


def _policies(cfg, run_dir: Path) -> dict[str, Path]:
    if not cfg.init_from:
        raise ValueError(f"{run_dir}: its config has no init_from; the policy before RL is unknown")
    after = run_dir / "model"
    if not after.is_dir():
        raise FileNotFoundError(f"{after}: the RL run has no final model (is it complete?)")
    before = Path(cfg.init_from)
    if not before.is_absolute() and not before.exists():
        # a path relative to where the run was launched: look for it from the run directory's parents
        for base in run_dir.resolve().parents:
            if (base / before).exists():
                before = base / before
                break
    if not before.exists():
        raise FileNotFoundError(f"{run_dir}: its starting checkpoint init_from={cfg.init_from} does not exist")
    return {"before": before, "after": after}


def _load_policy(path: Path, cfg, device: str):
    from harness.stages.evaluate import load_any_model

    model, processor, spec = load_any_model(path, cfg)
    if device != "cpu":
        model = model.to(device)
    return model, processor, spec


def _sample(model, processor, prompts, cfg, group_size: int, seed: int, batch_prompts: int) -> list[str]:
    import torch

    from harness.grpo.rollout import sample_rollout

    rl = cfg.rl
    texts: list[str] = []
    for start in range(0, len(prompts), batch_prompts):
        torch.manual_seed(seed * 1_000_003 + start)
        ro = sample_rollout(model, processor, prompts.images[start:start + batch_prompts],
                            prompts.instructions[start:start + batch_prompts], group_size=group_size,
                            temperature=rl.temperature, top_p=rl.top_p, top_k=rl.top_k,
                            max_new_tokens=rl.max_new_tokens, min_new_tokens=rl.min_new_tokens,
                            repetition_penalty=rl.repetition_penalty)
        texts.extend(ro.texts)
    return texts


def _free_memory(device: str) -> None:
    """Release the policy just used before the next one loads (a 7B model twice does not fit everywhere)."""
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _score(names: list[str], candidates: list[str], references: list[str], group_size: int) -> dict[str, np.ndarray]:
    from rewards.registry import compute_reward

    refs = [r for r in references for _ in range(group_size)]
    return {n: compute_reward(n, candidates, refs).reshape(len(references), group_size) for n in names}


def run_analysis(kind: str, run_dir: str | Path, n_prompts: int | None = None, group_size: int = 4, seed: int = 0,
                 device: str = "auto", batch_prompts: int = 8) -> Path:
    """Sample, score and write `<run_dir>/analysis_<kind>.json`; returns its path (see the module docstring).

    n_prompts: the first n validation prompts (None = all; the paper uses the whole MIMIC-CXR validation set).
    """
    from harness.records import atomic_write_json
    from harness.stages.common import load_splits, seed_everything
    from harness.stages.rl import prompt_set

    if kind not in KINDS:
        raise ValueError(f"unknown analysis '{kind}'; choose from {', '.join(KINDS)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    run_dir = Path(run_dir)
    cfg = _run_config(run_dir)
    policies = _policies(cfg, run_dir)
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    names = analysis_rewards(kind)
    samples = load_splits(cfg, progress=False)["val"]
    if n_prompts:
        samples = samples[:n_prompts]
    if not samples:
        raise ValueError(f"{run_dir}: the validation split is empty")
    out = {"kind": kind, "run_dir": str(run_dir), "n_prompts": len(samples), "group_size": group_size,
           "seed": seed, "rewards_used": names, "device": device, "policies": {}}
    t0 = time.time()
    for pol, path in policies.items():
        seed_everything(seed)
        model, processor, spec = _load_policy(path, cfg, device)
        prompts = prompt_set(cfg, samples, spec)
        cands = _sample(model, processor, prompts, cfg, group_size, seed, batch_prompts)
        del model
        _free_memory(device)
        rewards = _score(names, cands, prompts.references, group_size)
        out["policies"][pol] = {
            "model": str(path), "ids": prompts.ids,
            "candidates": [cands[i * group_size:(i + 1) * group_size] for i in range(len(samples))],
            "rewards": {k: v.tolist() for k, v in rewards.items()},
            "stats": analysis_stats(kind, rewards),
        }
    out["elapsed_s"] = time.time() - t0
    path = run_dir / f"analysis_{kind}.json"
    atomic_write_json(path, out)
    return path


def _num(v, digits: int = 3) -> str:
    """A number, or "n/a" for the null that JSON holds in place of NaN (e.g. P_sign with nothing to count)."""
    return "n/a" if v is None else f"{v:.{digits}f}"


def summary_lines(result_path: str | Path) -> list[str]:
    """Short human-readable lines of an analysis file (printed by the CLI)."""
    from harness.records import read_json

    d = read_json(result_path)
    lines = [f"{d['kind']}: {d['n_prompts']} prompts x G={d['group_size']} (seed {d['seed']})"]
    for pol, res in d["policies"].items():
        st = res["stats"]
        if d["kind"] == "sign-alignment":
            lines.append(f"  {pol:6s} P_sign={_num(st['p_sign']['value'])} (n={st['p_sign']['n_counted']})  "
                         f"P_top1={_num(st['p_top1']['value'])} (groups={st['p_top1']['n_groups_used']})")
        else:
            lines.append(f"  {pol:6s} " + "  ".join(f"{k}: mean std {_num(v['mean'], 4)}" for k, v in st.items()))
    return lines
