"""A study's declared contrasts and the rule that decides them (`contrasts:` and `decide:` of a study file), read
and checked as the study loads (harness/experiments/study.py); the rule itself is harness/stats/decisions.py."""

from __future__ import annotations

from typing import Any

from harness.config import ConfigError

# Test metrics a contrast may name (the keys of an evaluation's metrics.json; all higher-is-better).
CONTRAST_METRICS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L", "CIDEr", "findings_acc",
                    "findings_exact", "ce_micro_f1", "ce_macro_f1", "ce_example_f1", "entity_f1", "gold_f1",
                    "gold_exact", "gold_acc", "gold_precision", "gold_recall")
# rule: "anytime" (a confidence sequence, valid however seeds are added; issue 48) or "fixed_n" (paired t over
# seeds fixed in advance, or over planned looks): harness/stats/decisions.py
DECIDE_DEFAULTS = {"alpha": 0.05, "looks": None, "spending": "obrien_fleming", "rule": "anytime"}
SPENDING_KINDS = ("obrien_fleming", "pocock")
RULES = ("anytime", "fixed_n")  # harness/stats/decisions.RULES (kept here so that a study loads without scipy)


def check_contrasts(value: Any, where: str, names: list[str], baseline: str) -> list[dict]:
    """`contrasts:` a list of {arm, baseline (default: the study's), metrics: {metric: delta}}, flattened to one
    entry per metric: {arm, baseline, metric, delta}. delta is the smallest difference that matters (> 0)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: 'contrasts' must be a list of {{arm, baseline, metrics: {{metric: delta}}}}")
    out = []
    for i, c in enumerate(value):
        at = f"{where}: contrasts[{i}]"
        if not isinstance(c, dict) or set(c) - {"arm", "baseline", "metrics"}:
            raise ConfigError(f"{at} must be a mapping with keys arm, baseline (optional), metrics")
        arm, base = c.get("arm"), c.get("baseline", baseline)
        for key, name in (("arm", arm), ("baseline", base)):
            if name not in names:
                raise ConfigError(f"{at}: {key} '{name}' is not one of the arms: {', '.join(names)}")
        if arm == base:
            raise ConfigError(f"{at}: arm and baseline are both '{arm}'")
        metrics = c.get("metrics")
        if not isinstance(metrics, dict) or not metrics:
            raise ConfigError(f"{at}: 'metrics' must map test metrics to their delta, e.g. {{ce_micro_f1: 0.02}}")
        for metric, delta in metrics.items():
            if metric not in CONTRAST_METRICS:
                raise ConfigError(f"{at}: unknown metric '{metric}'; choose from {', '.join(CONTRAST_METRICS)}")
            if isinstance(delta, bool) or not isinstance(delta, int | float) or not delta > 0:
                raise ConfigError(f"{at}: delta of '{metric}' must be a number > 0 (the smallest difference that "
                                  f"matters), got {delta!r}")
            out.append({"arm": arm, "baseline": base, "metric": metric, "delta": float(delta)})
    keys = [(c["arm"], c["baseline"], c["metric"]) for c in out]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup:
        raise ConfigError(f"{where}: contrast {dup[0]} - {dup[1]} on {dup[2]} is declared twice")
    return out


def check_decide(value: Any, where: str) -> dict:
    """`decide:` {alpha (default 0.05), looks (planned seed counts of --until-decided, increasing, each >= 2),
    spending (obrien_fleming | pocock), rule (anytime | fixed_n)}."""
    if value is None:
        return dict(DECIDE_DEFAULTS)
    if not isinstance(value, dict) or set(value) - set(DECIDE_DEFAULTS):
        raise ConfigError(f"{where}: 'decide' must be a mapping with keys {', '.join(DECIDE_DEFAULTS)}")
    out = {**DECIDE_DEFAULTS, **value}
    alpha = out["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 0.5:
        raise ConfigError(f"{where}: decide.alpha must be in (0, 0.5), got {alpha!r}")
    looks = out["looks"]
    if looks is not None:
        ok = isinstance(looks, list) and looks and all(isinstance(k, int) and not isinstance(k, bool) and k >= 2
                                                       for k in looks)
        if not ok or sorted(set(looks)) != looks:
            raise ConfigError(f"{where}: decide.looks must be increasing seed counts >= 2, e.g. [3, 5, 8]; got "
                              f"{looks!r}")
    if out["spending"] not in SPENDING_KINDS:
        raise ConfigError(f"{where}: decide.spending must be one of {', '.join(SPENDING_KINDS)}, got "
                          f"{out['spending']!r}")
    if out["rule"] not in RULES:
        raise ConfigError(f"{where}: decide.rule must be one of {', '.join(RULES)}, got {out['rule']!r}")
    out["alpha"] = float(alpha)
    return out
