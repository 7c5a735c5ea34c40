"""A tiny fixed experiment written as run records (index.json + stage run dirs + eval metrics), with numbers
chosen so that the tables can be checked by hand:

arm       factors            BLEU_4 by seed 0/1/2     ROUGE_L          status
rer_vapr  rer, vapr (ref)    0.10 / 0.12 / 0.14       0.30 everywhere  complete x3
ckl       constant, vapr     0.09 / 0.11 / 0.13       0.30             complete x3   (diff -0.01 on every seed)
no_kl     none, vapr         0.12 / 0.10 / 0.14       0.30             complete x3   (diffs +0.02, -0.02, 0)
no_vapr   rer, static        0.11 / - / -             0.30             seed 0 only (seeds 1, 2 failed)

Every eval directory also holds predictions_final_test.jsonl (N_REPORTS per-report rows as the eval stage writes
them); no_vapr's reports match their references far better (more n-gram matches), so its single-seed comparison
with rer_vapr (the paired bootstrap over test reports) finds BLEU different and ROUGE-L (same per-report values)
not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ARMS = {
    "rer_vapr": ("Ours (RER+VAPR)", "rer", "vapr"),
    "ckl": ("w/ CKL, w/o RER", "constant", "vapr"),
    "no_kl": ("w/o KL", "none", "vapr"),
    "no_vapr": ("w/o VAPR", "rer", "static"),
}
BLEU4 = {"rer_vapr": [0.10, 0.12, 0.14], "ckl": [0.09, 0.11, 0.13], "no_kl": [0.12, 0.10, 0.14],
         "no_vapr": [0.11, None, None]}
N_STEPS = 24
DECODING = {"greedy": True, "max_new_tokens": 60, "min_new_tokens": 0, "repetition_penalty": 1.0, "batch_size": 32,
            "backend": "lean"}
N_REPORTS = 30


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rl_records(run: Path, arm: str, seed: int, regularizer: str, reference: str, dataset: str) -> None:
    run.mkdir(parents=True)
    cfg = {"seed": seed, "init_from": "../sft/model", "data": {"dataset": dataset},
           "rl": {"regularizer": regularizer, "reference": reference, "reward": "bleu4", "beta_min": 0.05,
                  "beta_base": 0.1, "beta_max": 0.12, "select": "best_val"}}
    (run / "manifest.json").write_text(json.dumps({"stage": "rl", "seed": seed, "config": cfg}))
    rng = np.random.default_rng(seed)
    base = {"rer": 0.30, "constant": 0.25, "none": 0.10}.get(regularizer, 0.2)
    steps = []
    for s in range(1, N_STEPS + 1):
        kl = 0.0 if regularizer == "none" else 0.001 * (s % 8 + 1 if reference == "vapr" else s)
        beta = 0.0 if regularizer == "none" else 0.1
        steps.append({"step": s, "epoch": s / 8, "reward_mean": base + 0.005 * s + 0.01 * rng.standard_normal(),
                      "reward_std": 0.05, "kl_mean": kl, "kl_loss": beta * kl, "beta_mean": beta,
                      "entropy_mean": 1.0 - 0.01 * s, "frac_reward_zero_std": 0.0})
    _write_jsonl(run / "steps.jsonl", steps)
    evals = []
    for s in (0, 8, 16, 24):
        row = {"step": s, "epoch": s // 8, "split": "val", "val_score": 0.2 + 0.001 * s + 0.001 * seed}
        if reference == "vapr":
            row.update(reset=s in (8, 24), best_score=row["val_score"])
        evals.append(row)
    _write_jsonl(run / "evals.jsonl", evals)
    best = evals[2] if arm == "rer_vapr" else evals[-1]  # rer_vapr tested at step 16 of 24, the others at 24
    (run / "metrics.json").write_text(json.dumps({"steps": N_STEPS, "select": "best_val", "selected_step": best["step"],
                                                  "selected_score": best["val_score"], "final_step": N_STEPS}))


def _analysis(run: Path, seed: int) -> None:
    """analysis_*.json as harness/stages/analyze.py writes them (2 prompts x G = 4, hand-made rewards)."""
    before_b = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.1, 0.3]]
    before_f = [[0.0, 0.5, 0.5, 1.0], [1.0, 0.0, 0.0, 1.0]]
    after_b = [[0.2, 0.3, 0.4, 0.5], [0.1, 0.2, 0.6, 0.3]]
    after_f = [[0.2, 0.4, 0.6, 0.8], [0.0, 0.5, 1.0, 0.5]]
    from reports.analyses import sign_alignment, within_group_std_summary

    sa = {"kind": "sign-alignment", "n_prompts": 2, "group_size": 4, "seed": seed, "policies": {}}
    rv = {"kind": "reward-variance", "n_prompts": 2, "group_size": 4, "seed": seed, "policies": {}}
    for pol, b, f in (("before", before_b, before_f), ("after", after_b, after_f)):
        sa["policies"][pol] = {"rewards": {"bleu4": b, "chexpert_f1": f}, "stats": sign_alignment(b, f)}
        stats = {"bleu4": within_group_std_summary(b), "chexpert_f1": within_group_std_summary(f)}
        rv["policies"][pol] = {"rewards": {"bleu4": b, "chexpert_f1": f}, "stats": stats}
    (run / "analysis_sign-alignment.json").write_text(json.dumps(sa))
    (run / "analysis_reward-variance.json").write_text(json.dumps(rv))


def _predictions(ev: Path, arm: str, seed: int) -> None:
    rng = np.random.default_rng(seed)  # the same test set (references, labels) for every arm of a seed
    arm_rng = np.random.default_rng([sum(map(ord, arm)), seed])
    rows = []
    for i in range(N_REPORTS):
        testlen, reflen = int(rng.integers(8, 20)), int(rng.integers(8, 20))
        guess = [max(0, testlen - k) for k in range(4)]
        share = 0.8 if arm == "no_vapr" else 0.3
        correct = [int(arm_rng.binomial(g, share * 0.7**k)) for k, g in enumerate(guess)]
        nlg = {**{f"correct_{k + 1}": float(c) for k, c in enumerate(correct)},
               **{f"guess_{k + 1}": float(g) for k, g in enumerate(guess)},
               "testlen": float(testlen), "reflen": float(reflen), "ROUGE_L": 0.30, "CIDEr": 0.5, "METEOR": 0.15}
        ref_labels = [1.0 if rng.random() < 0.3 else None for _ in range(14)]
        hyp_labels = [1.0 if arm_rng.random() < 0.3 else 0.0 for _ in range(14)]
        rows.append({"id": f"t{i}", "reference": "r", "generated": "g", "nlg": nlg, "hyp_labels": hyp_labels,
                     "ref_labels": ref_labels, "entity_f1": 0.3})
    _write_jsonl(ev / "predictions_final_test.jsonl", rows)


def write_journal(path: Path, n_trials: int = 4) -> Path:
    """An Optuna file journal (what `regbench search` writes) with a few finished trials."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="rer_bounds", storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: -(t.suggest_float("beta_base", 0.01, 0.2) - 0.1) ** 2, n_trials=n_trials)
    return path


def write_experiment(root: Path, dataset: str = "phantom") -> Path:
    arms = [{"name": a, "label": lab, "published_row": lab, "factors": {"regularizer": r, "reference": ref}}
            for a, (lab, r, ref) in ARMS.items()]
    runs = []
    for arm, (_, reg, ref) in ARMS.items():
        for seed in (0, 1, 2):
            value = BLEU4[arm][seed]
            rl_rel = f"stages/rl-seed{seed}-{arm}"
            entry = {"arm": arm, "seed": seed, "dir": f"{arm}/seed{seed}", "eval_dir": f"{arm}/seed{seed}/eval",
                     "stages": {"sft": {"dir": f"stages/sft-seed{seed}", "status": "complete", "elapsed_s": 12.4,
                                        "shared_by": sorted(ARMS)},
                                "rl": {"dir": rl_rel, "status": "complete", "elapsed_s": 30.2,
                                       "shared_by": [arm]}}, "final_stage": "rl"}
            if value is None:
                entry.update(status="failed", error="stage rl: RuntimeError: boom", failed_stage="rl")
                runs.append(entry)
                continue
            _rl_records(root / rl_rel, arm, seed, reg, ref, dataset)
            if arm == "rer_vapr":
                _analysis(root / rl_rel, seed)
            ev = root / arm / f"seed{seed}" / "eval"
            ev.mkdir(parents=True)
            scores = {"split": "test", "n": 6, "BLEU_1": 0.4, "BLEU_2": 0.3, "BLEU_3": 0.2, "BLEU_4": value,
                      "METEOR": 0.15, "ROUGE_L": 0.30, "CIDEr": 0.5, "ce_micro_precision": 0.5,
                      "ce_micro_recall": 0.4, "ce_micro_f1": 0.44 + 0.01 * seed, "entity_f1": 0.3,
                      "findings_acc": 0.9, "decoding": dict(DECODING)}
            (ev / "metrics.json").write_text(json.dumps(scores))
            _predictions(ev, arm, seed)
            entry.update(status="complete", metrics=f"{arm}/seed{seed}/eval/metrics.json")
            runs.append(entry)
    index = {"format": "regbench.experiment-index/1", "study": "table4_rl_ablation",
             "title": "REVA-PO Table 4: RL-stage modifications", "preset": "tiny-bench",
             "reproduces": "revapo_table4", "baseline_arm": "rer_vapr", "seeds": [0, 1, 2], "arms": arms,
             "runs": runs}
    (root / "index.json").write_text(json.dumps(index))
    return root


@pytest.fixture(scope="session")
def experiment_dir(tmp_path_factory) -> Path:
    root = write_experiment(tmp_path_factory.mktemp("experiment"))
    write_journal(root / "optuna.journal")
    return root


@pytest.fixture(scope="session")
def mimic_experiment_dir(tmp_path_factory) -> Path:
    """The same experiment, its runs labelled MIMIC-CXR: paper rows can sit beside its arms."""
    return write_experiment(tmp_path_factory.mktemp("experiment_mimic"), dataset="mimic_cxr")


@pytest.fixture(scope="session")
def built_report(experiment_dir, tmp_path_factory) -> Path:
    from harness.cli.report_commands import build_experiment_report

    return build_experiment_report(experiment_dir, tmp_path_factory.mktemp("report"), B=2000)


# ------------------------------------------------------------------------------------------------------
# The records a study file's experiment writes (arms, factors, pipelines from the YAML itself), with texts: the
# demo's page must draw every figure, Tables 1 / 2 must show their published rows.

SENTENCES = ["the heart size is normal .", "mild cardiomegaly .", "small left pleural effusion .",
             "no pneumothorax .", "the lungs are clear .", "right lower lobe opacity .", "a support device is seen ."]
CARDIO, EFFUSION = 2, 10  # OBSERVATIONS indices (harness/constants.py)


def _texts_and_labels(rng, quality: float) -> tuple[str, list]:
    picks = sorted(set(rng.choice(len(SENTENCES), size=3, replace=True).tolist()))
    labels = [0.0] * 14
    if 1 in picks:
        labels[CARDIO] = 1.0
    if 2 in picks:
        labels[EFFUSION] = 1.0
    return " ".join(SENTENCES[i] for i in picks), labels


def _text_predictions(path: Path, model: str, seed: int, quality: float) -> None:
    """Per-report rows with texts: the same references for every model of a seed, outputs by model."""
    rng = np.random.default_rng(seed)
    out_rng = np.random.default_rng([sum(map(ord, model)), seed])
    rows = []
    for i in range(N_REPORTS):
        ref, ref_labels = _texts_and_labels(rng, 1.0)
        if out_rng.random() < quality:
            gen, hyp_labels = ref, list(ref_labels)
        else:
            gen, hyp_labels = _texts_and_labels(out_rng, quality)
        n = len(gen.split())
        nlg = {**{f"correct_{k + 1}": float(max(0, n - k) if gen == ref else 0) for k in range(4)},
               **{f"guess_{k + 1}": float(max(0, n - k)) for k in range(4)},
               "testlen": float(n), "reflen": float(len(ref.split())), "ROUGE_L": 1.0 if gen == ref else 0.2,
               "CIDEr": 0.5, "METEOR": 0.15}
        rows.append({"id": f"t{i:02d}", "reference": ref, "generated": gen, "nlg": nlg, "hyp_labels": hyp_labels,
                     "ref_labels": [None if (j not in (CARDIO, EFFUSION) and v == 0.0) else v
                                    for j, v in enumerate(ref_labels)], "entity_f1": 0.3})
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_jsonl(path, rows)


INVERTED = {"bleu4": [0.1, 0.2, 0.3, 0.4], "entity_f1": [0.9, 0.6, 0.4, 0.1], "chexpert_f1": [1.0, 0.5, 0.5, 0.0]}


def _analysis_with_texts(run: Path, seed: int) -> None:
    """analysis_*.json as harness/stages/analyze.py writes them: 3 groups x G = 4 with texts; group v1 is ranked in
    exactly opposite orders by BLEU-4 and entity F1 (Fig. S6)."""
    refs = [SENTENCES[0] + " " + SENTENCES[3], SENTENCES[1], SENTENCES[2] + " " + SENTENCES[4]]
    groups = [[f"{SENTENCES[(g + j) % 7]} {SENTENCES[(g + 2 * j) % 7]}" for j in range(4)] for g in range(3)]
    flat = {"bleu4": [[0.3, 0.3, 0.1, 0.2], INVERTED["bleu4"], [0.0, 0.5, 0.2, 0.6]],
            "entity_f1": [[0.2, 0.4, 0.1, 0.2], INVERTED["entity_f1"], [0.1, 0.5, 0.3, 0.6]],
            "chexpert_f1": [[0.0, 0.5, 0.5, 1.0], INVERTED["chexpert_f1"], [1.0, 1.0, 1.0, 1.0]]}
    for kind, used in (("reward-variance", ["bleu4", "chexpert_f1", "entity_f1"]),
                       ("sign-alignment", ["bleu4", "chexpert_f1"])):
        pols = {}
        for pol, shift in (("before", 0.0), ("after", 0.05)):
            pols[pol] = {"model": "m", "ids": ["v0", "v1", "v2"], "references": refs, "candidates": groups,
                         "rewards": {n: [[v + (shift if n == "bleu4" and b != 1 else 0.0) for v in g]
                                         for b, g in enumerate(flat[n])] for n in used}}
        (run / f"analysis_{kind}.json").write_text(json.dumps(
            {"format": "regbench.analysis/1", "kind": kind, "key": "k", "n_prompts": 3, "group_size": 4,
             "seed": seed, "rewards_used": used, "policies": pols}))


def write_study_experiment(root: Path, study_file: Path, dataset: str = "phantom", stage_evals: bool = False) -> Path:
    """Records of a study file's arms x seeds as the runner writes them: RL runs for arms with an RL stage (with
    the analyses the study asks for), test evaluations with per-report texts for every arm, and (stage_evals)
    the demo's base / warm-up / SFT evaluations in eval_stages/<stage>/."""
    from harness.experiments import load_study

    study = load_study(study_file)
    quality = {"base": 0.05, "warmup": 0.2, "sft": 0.4, "rl": 0.6}
    runs = []
    for arm in study.arms:
        for seed in study.seeds:
            final = arm.final_stage or "base"
            entry = {"arm": arm.name, "seed": seed, "dir": f"{arm.name}/seed{seed}",
                     "eval_dir": f"{arm.name}/seed{seed}/eval", "status": "complete",
                     "final_stage": arm.final_stage, "metrics": f"{arm.name}/seed{seed}/eval/metrics.json",
                     "stages": {s: {"dir": f"stages/{s}-seed{seed}", "status": "complete", "elapsed_s": 5.0,
                                    "shared_by": [arm.name]} for s in arm.pipeline}}
            if "rl" in arm.pipeline:
                rl_rel = f"stages/rl-seed{seed}-{arm.name}"
                entry["stages"]["rl"]["dir"] = rl_rel
                f = arm.factors
                _rl_records(root / rl_rel, arm.name, seed, f.get("regularizer", "rer"), f.get("reference", "vapr"),
                            dataset)
                ana = study.analyses
                if ana and (ana["arms"] is None or arm.name in ana["arms"]):
                    _analysis_with_texts(root / rl_rel, seed)
                    entry["stages"]["analysis"] = {"dir": rl_rel, "status": "complete", "kinds": ana["kinds"]}
            ev = root / arm.name / f"seed{seed}" / "eval"
            _text_predictions(ev / "predictions_final_test.jsonl", arm.name, seed, quality[final])
            q = quality[final] + 0.002 * len(arm.name)
            scores = {"split": "test", "n": N_REPORTS, "BLEU_1": 0.3 + q / 2, "BLEU_2": 0.2 + q / 2,
                      "BLEU_3": 0.1 + q / 2, "BLEU_4": 0.05 + q / 2, "METEOR": 0.1 + q / 4, "ROUGE_L": 0.2 + q / 3,
                      "CIDEr": 0.5, "ce_micro_precision": 0.3 + q / 3, "ce_micro_recall": 0.2 + q / 3,
                      "ce_micro_f1": 0.25 + q / 3, "entity_f1": 0.3, "findings_acc": 0.8,
                      "decoding": dict(DECODING)}
            (ev / "metrics.json").write_text(json.dumps(scores))
            runs.append(entry)
    if stage_evals:  # the study's `stage_evals` nodes: eval_stages/<stage>/
        for stage, q in (("base", 0.05), ("warmup", 0.2), ("sft", 0.4)):
            _text_predictions(root / "eval_stages" / stage / "predictions_final_test.jsonl", stage, study.seeds[0], q)
    index = {"format": "regbench.experiment-index/1", "study": study.name, "title": study.title,
             "preset": study.preset, "reproduces": study.reproduces, "baseline_arm": study.baseline,
             "published_dataset": study.published_dataset, "seeds": study.seeds,
             "arms": [a.describe() for a in study.arms], "runs": runs}
    (root / "index.json").write_text(json.dumps(index))
    return root


EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


@pytest.fixture(scope="session")
def demo_experiment_dir(tmp_path_factory) -> Path:
    """The records of experiments/demo_rl_ablation.yaml's arms (as `regbench demo` leaves them)."""
    return write_study_experiment(tmp_path_factory.mktemp("demo"), EXPERIMENTS / "demo_rl_ablation.yaml",
                                  stage_evals=True)


@pytest.fixture(scope="session")
def demo_report(demo_experiment_dir, tmp_path_factory) -> Path:
    from reports.build import build_report

    return build_report(demo_experiment_dir, tmp_path_factory.mktemp("demo_report"), B=500)
