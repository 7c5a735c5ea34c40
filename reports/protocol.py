"""Which selected policy each arm was tested at, and whether two arms were scored the same way.

A comparison is only fair when both arms' test models were chosen by the same rule (`rl.select`: best_val or
final, issue 9), decoded with the same greedy settings, and trained by the same RL computation (the rollout
sampler `generation.backend` and the log-prob passes `rl.lora_pass` / `rl.prompt_pass`: the inexact options of
issue 27 compute other last bits, so one arm with them and one without differ by more than the regularizer). All
are read from the run records:
- the rule: the RL run's manifest (`config.rl.select`), else the `select` its metrics.json records;
- the checkpoint: the RL run's metrics.json `selected_step` / `final_step` (arms without RL: the end of their
  last stage);
- the decoding: the test evaluation's `decoding` (harness/stages/evaluate.py); older records without it are
  "unknown" and never refused;
- the validation score that chose the tested checkpoint (rl.select best_val) and VAPR's anchor: the RL run's
  `config.rl.val_score` / `val_lambda` / `val_rg_metric` (REVA-PO Eq. 10 or the official code's weighting,
  docs/paper_vs_code.md), stated beside every results table (`selection_score`, `selection_score_note`).
"""

from __future__ import annotations

from reports.experiment import Experiment, Run

# Settings that change the decoded tokens (batch size and backend do not: decoding is per row and the lean
# backend equals transformers' generate, tests/harness/sampling/test_lean_decode.py).
DECODING_KEYS = ("greedy", "max_new_tokens", "min_new_tokens", "repetition_penalty")
# How the RL stage computes (section, key, the value of records written before the key existed; None = unknown).
RL_COMPUTATION_KEYS = (("generation", "backend", None), ("rl", "lora_pass", "peft"), ("rl", "prompt_pass", "per_row"))


def select_rule(run: Run) -> str | None:
    """The configured rl.select of the run's RL stage; None when the arm has no RL stage."""
    if run.rl_dir is None:
        return None
    rule = (run.config.get("rl") or {}).get("select")
    if rule:
        return str(rule)
    recorded = run.rl_metrics.get("select")
    return str(recorded).split()[0] if recorded else None


# rl.val_score (harness/config/rl.py) in words; M = BLEU-1..4, METEOR, ROUGE-L.
VAL_SCORES = {"paper": "Eq. 10, (sum(M) + {lam} RG) / (|M| + 1)", "official": "official code, mean(M) + {lam} RG"}


def selection_score(run: Run) -> str | None:
    """The validation score that picked the run's tested checkpoint (rl.select best_val) and VAPR's anchor, in
    words, e.g. "official code, mean(M) + 0.1 RG (RG: radgraph)"; None when no validation score chose anything
    (no RL stage, or rl.select final without VAPR)."""
    if run.rl_dir is None:
        return None
    rl = run.config.get("rl") or {}
    if select_rule(run) != "best_val" and rl.get("reference") != "vapr":
        return None
    kind = rl.get("val_score")
    if kind is None:
        return "not recorded"
    lam = rl.get("val_lambda", 0.1)
    text = VAL_SCORES.get(str(kind), str(kind)).format(lam=f"{float(lam):g}")
    return f"{text} (RG: {rl['val_rg_metric']})" if rl.get("val_rg_metric") else text


def selection_score_note(exp: Experiment, arms) -> str | None:
    """One sentence for a table: which validation score chose each arm's tested checkpoint and VAPR's anchor."""
    by_score: dict[str, list[str]] = {}
    for arm in arms:
        for score in dict.fromkeys(selection_score(r) for r in exp.runs_of(arm)):
            if score is not None:
                by_score.setdefault(score, []).append(arm)
    if not by_score:
        return None
    head = ("Validation score s_val (rl.val_score) that selected the tested checkpoint (rl.select best_val) and "
            "VAPR's anchor, M = BLEU-1..4, METEOR, ROUGE-L: ")
    if len(by_score) == 1:
        return head + f"{next(iter(by_score))}, every RL arm that selects by it (docs/paper_vs_code.md)."
    parts = [f"{score} for {', '.join(f'`{a}`' for a in arms_)}" for score, arms_ in by_score.items()]
    return head + "; ".join(parts) + " (docs/paper_vs_code.md)."


def decoding(run: Run) -> dict | None:
    d = run.scores.get("decoding")
    if not isinstance(d, dict):
        return None
    return {k: d.get(k) for k in DECODING_KEYS}


def rl_computation(run: Run) -> dict | None:
    """{"generation.backend": ..., "rl.lora_pass": ..., "rl.prompt_pass": ...} of the run's RL stage (keys whose
    value the record does not tell left out); None when the arm has no RL stage."""
    if run.rl_dir is None:
        return None
    out = {}
    for section, key, before in RL_COMPUTATION_KEYS:
        value = (run.config.get(section) or {}).get(key, before)
        if value is not None:
            out[f"{section}.{key}"] = value
    return out


def tested_at(run: Run) -> str:
    """e.g. "rl step 24/30 (best_val)", "sft: end", "base model"."""
    if run.rl_dir is not None:
        m = run.rl_metrics
        if "selected_step" not in m:
            return "rl (step not recorded)"
        rule = m.get("select") or select_rule(run) or "?"
        return f"rl step {m['selected_step']}/{m.get('final_step', '?')} ({rule})"
    if run.final_stage == "base":
        return "base model"
    return "?" if run.final_stage == "?" else f"{run.final_stage}: end"


def arm_tested_at(exp: Experiment, arm: str) -> str:
    """One cell for the arm: its runs' checkpoints (seeds in order), identical ones merged."""
    cells = [tested_at(r) for r in exp.runs_of(arm)]
    if not cells:
        return "–"
    unique = list(dict.fromkeys(cells))
    if len(unique) == 1:
        return unique[0]
    rules = {c.rsplit("(", 1)[-1].rstrip(")") for c in cells if c.startswith("rl step")}
    if len(rules) == 1 and all(c.startswith("rl step") for c in cells):
        steps = ", ".join(c.split()[2] for c in cells)
        return f"rl steps {steps} ({rules.pop()})"
    return "; ".join(cells)


def protocol_issue(exp: Experiment, arm: str, ref: str) -> str | None:
    """Why `arm` and `ref` may not be compared (different rl.select rules, RL computation or test decoding), or
    None."""
    issues = []
    rules = {a: {select_rule(r) for r in exp.runs_of(a)} - {None} for a in (arm, ref)}
    if rules[arm] and rules[ref] and rules[arm] != rules[ref]:
        issues.append(f"rl.select {'/'.join(sorted(rules[arm]))} vs {'/'.join(sorted(rules[ref]))}")
    comps = {a: [c for c in (rl_computation(r) for r in exp.runs_of(a)) if c is not None] for a in (arm, ref)}
    if comps[arm] and comps[ref]:
        keys = [k for k in dict.fromkeys(k for c in comps[arm] + comps[ref] for k in c)
                if {repr(c.get(k)) for c in comps[arm]} != {repr(c.get(k)) for c in comps[ref]}]
        if keys:
            def values(a: str, k: str) -> str:  # every value of the arm's seeds
                return "/".join(sorted({str(c.get(k)) for c in comps[a]}))

            issues.append("RL computation " + ", ".join(f"{k} {values(arm, k)} vs {values(ref, k)}" for k in keys))
    decs = {a: [d for d in (decoding(r) for r in exp.runs_of(a)) if d is not None] for a in (arm, ref)}
    if decs[arm] and decs[ref]:
        keys = [k for k in DECODING_KEYS
                if {repr(d[k]) for d in decs[arm]} != {repr(d[k]) for d in decs[ref]}]
        if keys:
            a, b = decs[arm][0], decs[ref][0]
            issues.append("test decoding " + ", ".join(f"{k} {a[k]} vs {b[k]}" for k in keys))
    return "; ".join(issues) or None
