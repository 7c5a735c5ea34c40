"""Issue 49's measure: the count of refused commands that change their folder, 0.

Every refusal case of the fault suite runs once here (the bad-input corpus, the checks before writing, the
refused resumes, a full disk during `report`, `eval --out` of a finished evaluation); the whole temporary
folder of each, every path and every file's sha256, is compared before and after. The per-case tests say why
a case fails; this one counts them all together, so the number the issue asks for is one test's result."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from tests.harness import test_bad_inputs as bad_inputs
from tests.harness import test_checks_before_writing as before_writing
from tests.harness.runs import test_refused_untouched as untouched

ROOT = Path(__file__).resolve().parents[3]


def _bad_input(case, tmp: Path, m) -> list[str]:
    _, kind, argv, _ = case
    names = bad_inputs._setup(tmp, kind)
    args = [a.format(**names) for a in argv]
    if args[0] in ("train", "classifier", "eval"):
        args.append("--no-progress")
        if not any(a.startswith("data.synth_dir=") for a in args):
            args.append(f"data.synth_dir={tmp}/phantom")
    if args[:2] == ["experiment", "list"]:
        args[2] = str(ROOT / args[2])
    return args


def _before_writing(case, tmp: Path, m) -> list[str]:
    _, kind, argv, _ = case
    names = before_writing._setup(tmp, kind)
    if kind.startswith("user_reward_"):
        m.syspath_prepend(str(tmp))
    if kind.startswith("wandb_"):
        m.setenv("WANDB_MODE", "online")
        m.setenv("NETRC", str(tmp / "no-netrc"))
        m.delenv("WANDB_API_KEY", raising=False)
        if kind == "wandb_unreachable":
            m.setenv("WANDB_API_KEY", "k" * 40)
            m.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    if kind == "no_slurm":
        m.setattr("harness.experiments.slurm_queue.slurm_available", lambda: "no sbatch on PATH")
    if kind == "no_native_bf16":
        m.setattr("harness.models.classifier.training.native_cpu_bf16", lambda: False)
    return [a.format(**names) for a in argv]


def _resume(case, tmp: Path, m) -> list[str]:
    stage, damage = case
    extra = (f"classifier.dir={before_writing._classifier(tmp / 'clf')}",) if stage == "sft" else ()
    return untouched.resumable_run(tmp, stage, damage, extra)


def _report_full_disk(case, tmp: Path, m) -> list[str]:
    from tests.reports.conftest import write_experiment

    experiment = write_experiment(tmp / "experiment")
    untouched._full_disk_at_the_page(m)
    return ["report", str(experiment), "--bootstrap", "20"]


def _cases() -> list[tuple[str, object, object]]:
    cases = [(f"bad_inputs/{c[0]}", _bad_input, c) for c in bad_inputs.CASES]
    cases += [(f"before_writing/{c[0]}", _before_writing, c) for c in before_writing.CASES]
    cases += [(f"resume/{s}_{d}", _resume, (s, d)) for s, d in untouched.RESUMES]
    cases += [("report/full_disk", _report_full_disk, None)]
    return cases


@pytest.mark.slow
def test_no_refused_command_changes_its_folder(tmp_path, capsys, monkeypatch):
    changed, not_refused = [], []
    cases = _cases()
    for name, setup, case in cases:
        tmp = tmp_path / name.replace("/", "__")
        tmp.mkdir()
        with monkeypatch.context() as m:
            m.chdir(tmp)  # default folders (runs/...) would land here
            argv = setup(case, tmp, m)
            before = untouched.tree_digest(tmp)
            rc = main(argv)
            after = untouched.tree_digest(tmp)
        capsys.readouterr()
        if rc != 2:
            not_refused.append(f"{name}: exit {rc}")
        if after != before:
            diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            changed.append(f"{name}: {diff[:4]}")
    with capsys.disabled():
        print(f"\nrefused commands run: {len(cases)}; refused commands that changed their folder: {len(changed)}")
    assert not not_refused, not_refused
    assert len(changed) == 0, changed
    assert len(cases) >= 150
