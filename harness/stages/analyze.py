"""REVA-PO Supp. A.1 / A.3 records of an RL run: candidates sampled before and after RL, and their rewards.

For the policy before RL (the run's starting checkpoint, `init_from` in its manifest) and after RL (its saved
`model/`, the checkpoint rl.select chose), sample `group_size` (G = 4) candidates per validation prompt with
`harness.grpo.rollout.sample_rollout` (the run's own rollout settings: temperature, top-p, top-k, token limits,
repetition penalty; prompts built as in its RL stage, classifier diseases included when the checkpoint records a
classifier), score every candidate with the reward registry and write `analysis_<kind>.json` into the run
directory:

  reward-variance  rewards bleu4, chexpert_f1 and radgraph_f1 (when its weights are present; else the offline
                   entity_f1, named as such)                    -> Supp. A.1, Fig. S5, Fig. S6
  sign-alignment   rewards bleu4 and chexpert_f1                 -> Supp. A.3 (P_sign, P_top1)

Several kinds asked together share one sample per policy. The policy before RL is the same for every arm and
seed that starts from one SFT model, and its sample depends only on that model, the analysis' own seed and the
settings sampling reads (`before_sample_key`), so it is drawn once: the first analysis keeps its candidates beside
that model (`<init_from>/../analysis_samples/<key>.json`) and the others read them (exact by construction: the
same call on the same inputs). Sampling uses the run's `generation.backend` (`lean` by default: the tokens of
transformers' `generate`, harness/sampling/lean_decode.py). A file holds the candidates, the validation ids and
references and the per-group rewards ([B][G] per reward); the statistics are computed by reports/ from them
(reports/analyses.py), so that nothing here depends on reports/. Sampling is seeded: the same run, seed and
prompts give the same file. The experiment runner runs this after a study's RL arms when the study asks for it
(`analyses:` in the study file, harness/experiments/); `regbench analyze KIND RUN` runs it by hand.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from harness.config import RunConfig, from_dict
from harness.prompting.output_format import reward_inputs
from harness.runs.digest import model_digest
from harness.runs.records import atomic_write_json, kept_result, read_json
from harness.runs.schema import analysis_file
from harness.stages.paths import analyses_done  # noqa: F401 - re-exported: this stage's completion check
from rewards.radgraph import radgraph_available
from rewards.spec import compute_reward

KINDS = ("reward-variance", "sign-alignment")
FORMAT = "regbench.analysis/1"
SHARED_FOLDER = "analysis_samples"
# The RL fields the sampling of an analysis reads (`_sample`); every other RL field is the training's.
RL_FIELDS_SAMPLED_WITH = ("temperature", "top_p", "top_k", "max_new_tokens", "min_new_tokens", "repetition_penalty")


def analysis_rewards(kind: str) -> list[str]:
    """The rewards one kind of analysis scores."""
    if kind == "sign-alignment":
        return ["bleu4", "chexpert_f1"]
    if kind != "reward-variance":
        raise ValueError(f"unknown analysis '{kind}'; choose from {', '.join(KINDS)}")

    return ["bleu4", "chexpert_f1", "radgraph_f1" if radgraph_available() else "entity_f1"]


def _run_config(run_dir: Path):
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
    # lazy: start-up cost (torch)
    from harness.models.checkpoint import load_any_model

    model, processor, spec = load_any_model(path, cfg.model)
    if device != "cpu":
        model = model.to(device)
    return model, processor, spec


def _sample(model, processor, prompts, cfg, group_size: int, seed: int, batch_prompts: int) -> list[str]:
    # lazy: start-up cost (torch)
    import torch

    # lazy: start-up cost (torch)
    from harness.grpo.rollout import sample_rollout

    rl = cfg.rl
    if cfg.generation.backend == "vllm":  # one engine, resynced for the policy after RL (vllm_rollout.start_engine)
        # lazy: start-up cost (torch)
        from harness.sampling.vllm_rollout import start_engine

        start_engine(model, processor, cfg.generation, [(prompts.images, prompts.instructions, rl.max_new_tokens)],
                     seed=seed)
    texts: list[str] = []
    for start in range(0, len(prompts.ids), batch_prompts):
        torch.manual_seed(seed * 1_000_003 + start)
        ro = sample_rollout(model, processor, prompts.images[start:start + batch_prompts],
                            prompts.instructions[start:start + batch_prompts], group_size=group_size,
                            temperature=rl.temperature, top_p=rl.top_p, top_k=rl.top_k,
                            max_new_tokens=rl.max_new_tokens, min_new_tokens=rl.min_new_tokens,
                            repetition_penalty=rl.repetition_penalty, backend=cfg.generation.backend)
        texts.extend(ro.texts)
    return texts


def before_sample_key(cfg, before: Path, ids: list[str], group_size: int, seed: int, batch_prompts: int,
                      device: str) -> str:
    """The key of the candidates sampled from the policy before RL: the model's bytes, the run's config less what
    neither loading nor sampling reads (the training loop, the regularizer, the arm's reward: the analysis scores
    its own rewards), the prompts' ids and the sampling call's own arguments."""
    # lazy: start-up cost (torch); tests replace to_dict at its source, read at call time
    from harness.config import to_dict
    from harness.grpo.start_validation import NOT_READ_TOP  # the run's own fields: where, seed, training loop

    d = to_dict(cfg)
    for name in NOT_READ_TOP:
        d.pop(name, None)
    d["rl"] = {k: d["rl"][k] for k in RL_FIELDS_SAMPLED_WITH}
    payload = json.dumps({"model": model_digest(before), "config": d, "ids": ids, "group_size": group_size,
                          "seed": seed, "batch_prompts": batch_prompts, "device": device}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _free_memory(device: str) -> None:
    """Release the policy just used before the next one loads (a 7B model twice does not fit everywhere)."""
    gc.collect()
    if device.startswith("cuda"):
        # lazy: start-up cost (torch)
        import torch

        torch.cuda.empty_cache()


def _score(names: list[str], candidates: list[str], references: list[str], group_size: int,
           output_format: str = "plain") -> dict[str, np.ndarray]:
    """Each reward of `names` on the candidates; a think_report model's candidates are scored as the RL reward
    scores them (harness/prompting/output_format.py: reward_inputs, the <report> part for a clinical reward)."""
    refs = [r for r in references for _ in range(group_size)]
    return {n: compute_reward(n, reward_inputs(n, candidates, output_format), refs).reshape(len(references), group_size)
            for n in names}


def run_analyses(run_dir: str | Path, kinds: list[str] | tuple[str, ...] = KINDS, n_prompts: int | None = None,
                 group_size: int = 4, seed: int = 0, device: str = "auto", batch_prompts: int = 8,
                 key: str | None = None, progress: bool = False) -> list[Path]:
    """Sample once per policy, score every reward the `kinds` need, write `<run_dir>/analysis_<kind>.json` for
    each kind; returns their paths. n_prompts: the first n validation prompts (None = all; the paper uses the
    whole MIMIC-CXR validation set). `key` is stored in the files (the experiment runner's node key)."""
    # lazy: start-up cost (torch)
    from harness.stages.common import load_splits, seed_everything
    from harness.stages.prompts import prompt_set

    kinds = list(dict.fromkeys(kinds))
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown analysis '{kind}'; choose from {', '.join(KINDS)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    run_dir = Path(run_dir)
    cfg = _run_config(run_dir)
    policies = _policies(cfg, run_dir)
    if device == "auto":
        # lazy: start-up cost (torch)
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    per_kind = {k: analysis_rewards(k) for k in kinds}
    names = list(dict.fromkeys(n for ns in per_kind.values() for n in ns))
    samples = load_splits(cfg, progress=False)["val"]
    if n_prompts:
        samples = samples[:n_prompts]
    if not samples:
        raise ValueError(f"{run_dir}: the validation split is empty")
    t0 = time.time()
    results = {}
    for pol, path in policies.items():
        seed_everything(seed)
        model, processor, spec = _load_policy(path, cfg, device)
        prompts = prompt_set(cfg.prompt, cfg.model, samples, spec)
        args = (model, processor, prompts, cfg, group_size, seed, batch_prompts)
        if pol == "before":  # the same for every analysis of a run that starts from this model
            key_ = before_sample_key(cfg, path, list(prompts.ids), group_size, seed, batch_prompts, device)
            cands = kept_result(Path(path).parent / SHARED_FOLDER / f"{key_}.json", "candidates",
                                functools.partial(_sample, *args))
        else:
            cands = _sample(*args)
        del args
        del model
        _free_memory(device)
        results[pol] = {"model": str(path), "ids": list(prompts.ids), "references": list(prompts.references),
                        "candidates": [cands[i * group_size:(i + 1) * group_size] for i in range(len(samples))],
                        "rewards": _score(names, cands, prompts.references, group_size, cfg.prompt.output_format)}
    elapsed = time.time() - t0
    paths = []
    for kind, used in per_kind.items():
        out = {"format": FORMAT, "kind": kind, "key": key, "run_dir": str(run_dir), "n_prompts": len(samples),
               "group_size": group_size, "seed": seed, "rewards_used": used, "device": device,
               "elapsed_s": elapsed, "policies": {
                   pol: {**{k: v for k, v in res.items() if k != "rewards"},
                         "rewards": {n: res["rewards"][n].tolist() for n in used}}
                   for pol, res in results.items()}}
        path = run_dir / analysis_file(kind)
        atomic_write_json(path, out)
        paths.append(path)
    return paths


def run_analysis(kind: str, run_dir: str | Path, n_prompts: int | None = None, group_size: int = 4, seed: int = 0,
                 device: str = "auto", batch_prompts: int = 8) -> Path:
    """One kind (`regbench analyze KIND RUN`); returns the path of its file."""
    if kind not in KINDS:
        raise ValueError(f"unknown analysis '{kind}'; choose from {', '.join(KINDS)}")
    return run_analyses(run_dir, [kind], n_prompts, group_size, seed, device, batch_prompts)[0]


# ---------------------------------------------------------------------------------------------------------
# The study field (harness/experiments/study.py): which RL runs of a study are analysed, and how.

_SPEC_KEYS = {"kinds", "arms", "n_prompts", "group_size", "seed"}


def _kind(name, where: str) -> str:
    kind = str(name).replace("_", "-")
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown analysis {name!r}; valid: {', '.join(k.replace('-', '_') for k in KINDS)}")
    return kind


def parse_study_analyses(value, where: str, arm_names: list[str]) -> dict | None:
    """A study's `analyses:` as {kinds, arms, n_prompts, group_size, seed} (None when absent or empty).

    Either a list of kinds (`[reward_variance, sign_alignment]`: every arm with an RL stage, all validation
    prompts, G = 4 as in Supp. A, seed 0) or a mapping with `kinds` and optionally `arms`, `n_prompts`,
    `group_size`, `seed`."""
    if not value:
        return None
    if isinstance(value, list):
        value = {"kinds": value}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: 'analyses' must be a list of kinds or a mapping with 'kinds', got {value!r}")
    bad = sorted(set(value) - _SPEC_KEYS)
    if bad:
        raise ValueError(f"{where}: analyses: unknown key '{bad[0]}'; valid: {', '.join(sorted(_SPEC_KEYS))}")
    kinds = value.get("kinds")
    if not isinstance(kinds, list) or not kinds:
        raise ValueError(f"{where}: analyses.kinds must be a non-empty list, got {kinds!r}")
    arms = value.get("arms")
    if arms is not None and (not isinstance(arms, list) or any(a not in arm_names for a in arms)):
        raise ValueError(f"{where}: analyses.arms must list arms of the study ({', '.join(arm_names)}), got {arms!r}")
    out = {"kinds": [_kind(k, where) for k in kinds], "arms": arms, "n_prompts": value.get("n_prompts"),
           "group_size": value.get("group_size", 4), "seed": value.get("seed", 0)}
    for k, lo in (("n_prompts", 1), ("group_size", 2), ("seed", 0)):
        v = out[k]
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < lo):
            raise ValueError(f"{where}: analyses.{k} must be an integer >= {lo}, got {v!r}")
    return out
