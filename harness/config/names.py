"""What config values name, parsed: the trackers of `train.report_to`, the signals of `train.preempt_signals`,
and the schedule names of `train.scheduler` / `train.warmup_type`.

Config validation refuses a bad value when the config loads; the run folder's side acts on the parsed names
(harness/runs/trackers.py opens the trackers, harness/runs/preemption.py installs the signal handlers), so both
read them from here, below them.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence

__all__ = ["CLASSIFIER_PRETRAINED_FORMATS", "CLASSIFIER_SCHEDULERS", "CLASSIFIER_SELECTIONS", "COSINE_SCHEDULERS",
           "DEEPSPEED_WARMUP_TYPES", "SCHEDULERS", "TRACKERS", "WARMUP_TYPES", "signal_numbers", "tracker_names"]

# train.scheduler values (harness/training/schedule.py computes them); the cosine ones decay to a floor at a horizon,
# the others stay at the peak.
SCHEDULERS = ("cosine", "constant", "warmup_constant", "warmup_cosine")
COSINE_SCHEDULERS = ("cosine", "warmup_cosine")
# train.warmup_type values: this project's ramp, transformers', and DeepSpeed's two (the official code's).
WARMUP_TYPES = ("project", "transformers", "linear", "log")
DEEPSPEED_WARMUP_TYPES = ("linear", "log")
# classifier.pretrained_format / classifier.scheduler / classifier.select values (harness/models/classifier/ acts
# on them; the config check refuses others).
CLASSIFIER_PRETRAINED_FORMATS = ("regbench", "medical_mae")
CLASSIFIER_SCHEDULERS = ("constant", "warmup_cosine")
CLASSIFIER_SELECTIONS = ("val_loss", "mean_auc")

TRACKERS = ("tensorboard", "wandb")
# Signals a process cannot handle, or that would make no sense as "please stop": refused by the config check.
_REFUSED = ("SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGCHLD")


def tracker_names(report_to: str | Sequence[str] | None) -> list[str]:
    """The trackers `train.report_to` names, in order, without repeats: "none" (or an empty list) is none, a
    string is one, a list several. Unknown names are a ValueError naming them and the known ones."""
    if report_to is None:
        return []
    items = [report_to] if isinstance(report_to, str) else list(report_to)
    names = list(dict.fromkeys(str(x).strip().lower() for x in items))
    unknown = [n for n in names if n not in (*TRACKERS, "none")]
    if unknown:
        raise ValueError(f"unknown tracker {unknown[0]!r}; known: {', '.join(TRACKERS)}, none")
    if "none" in names and len(names) > 1:
        raise ValueError(f"'none' cannot be combined with other trackers ({', '.join(names)})")
    return [n for n in names if n != "none"]


def signal_numbers(names: Iterable[str], key: str = "train.preempt_signals") -> list[signal.Signals]:
    """The signals named (e.g. "SIGTERM", "USR1", "10"); a clear error naming `key` for a bad one."""
    out = []
    for name in names:
        text = str(name).strip().upper()
        try:
            sig = signal.Signals(int(text)) if text.isdigit() else signal.Signals[
                text if text.startswith("SIG") else f"SIG{text}"]
        except (KeyError, ValueError):
            raise ValueError(f"{key}: {name!r} is not a signal name (e.g. SIGTERM, SIGUSR1, SIGUSR2, SIGINT)") \
                from None
        if sig.name in _REFUSED:
            raise ValueError(f"{key}: {sig.name} cannot ask a run to stop (it cannot be handled, or it reports a "
                             f"crash); use SIGTERM, SIGUSR1, SIGUSR2 or SIGINT")
        out.append(sig)
    return out
