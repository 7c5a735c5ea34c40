"""The paper presets against every key of the official REVA-PO configs (docs/official_reva_po_keys.yaml).

The table lists each key of the official stage-1, stage-2, classifier and stage-3 configs (yaml and DeepSpeed
json; github.com/LiGuo12/REVA_PO, read once by hand: no network here) and the code behaviours no key names. Each
paper preset (`experiments/presets/{mimic,iuxray}-qwen2.5vl-{7b,3b}.yaml`) is resolved per stage as
`regbench config show PRESET --stage S` resolves it (`harness.config.load_config(path, stage=S)`), and every
`matched` row's field (and each of its `also` stage / field / expect triples) must resolve to its `expect`.
`differs` rows must name a real config field as their option; `pending` rows (options being added in parallel
branches) and `open` rows (differences no option covers yet) are skipped with the option / the difference named.
docs/paper_vs_code.md explains the table.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.config import load_config
from harness.config.loading import to_dict

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "official_reva_po_keys.yaml"
PRESET_DIR = ROOT / "experiments" / "presets"
PRESETS = {  # preset -> (data set, model size)
    "mimic-qwen2.5vl-7b": ("mimic", "7b"),
    "mimic-qwen2.5vl-3b": ("mimic", "3b"),
    "iuxray-qwen2.5vl-7b": ("iuxray", "7b"),
    "iuxray-qwen2.5vl-3b": ("iuxray", "3b"),
}
STAGES = ("warmup", "classifier", "sft", "rl", "eval")
EVERY_STAGE = ("all", "data")  # rows bound to no single stage: checked in every stage's view
STATUSES = ("matched", "differs", "pending", "open", "not_applicable")
DATASETS = ("mimic", "iuxray", "both")

# Every official config file and how many keys it has (leaves of the yaml / json tree; a list is one key). The
# table must hold each key once: a row lost in a merge, or a file left out, fails here.
OFFICIAL_FILES = {
    "train_configs/stage1/mimic_stage1.yaml": 33,
    "train_configs/stage1/iuxray_stage1.yaml": 34,
    "train_configs/stage1/zero_mimic_stage1.json": 24,
    "train_configs/stage1/zero_iuxray_stage1.json": 25,
    "train_configs/stage2/mimic_stage2.yaml": 41,
    "train_configs/stage2/iuxray_stage2.yaml": 41,
    "train_configs/stage2/zero_mimic_stage2.json": 24,
    "train_configs/stage2/zero_iuxray_stage2.json": 24,
    "train_configs/stage2_cls/mimic_stage2_cls.yaml": 33,
    "train_configs/stage2_cls/iuxray_stage2_cls.yaml": 33,
    "train_configs/stage2_cls/zero_mimic_stage2_cls.json": 20,
    "train_configs/stage2_cls/zero_iuxray_stage2_cls.json": 20,
    "train_configs/stage3/mimic_stage3.yaml": 53,
    "train_configs/stage3/iuxray_stage3.yaml": 51,
    "train_configs/stage3/zero_mimic_stage3.json": 24,
    "train_configs/stage3/zero_iuxray_stage3.json": 24,
    "reva_po/configs/default.yaml": 1,
    "reva_po/configs/models/REVA.yaml": 1,
    "reva_po/configs/models/Medical_MAE.yaml": 1,
    "reva_po/configs/datasets/iuxray/iuxray.yaml": 3,
}
# Official code files whose behaviours (no config key) have rows of their own.
CODE_FILES = ("reva_po/models/reva.py", "reva_po/runners/runner_base.py", "reva_po/utils/lr_decay.py",
              "reva_po/tasks/report_generation.py")
# Fields each status needs beside file, key, official, stage, datasets, status.
REQUIRED = {"matched": (), "differs": ("option", "note"), "pending": ("field", "option"), "open": ("note",),
            "not_applicable": ("note",)}
_MISSING = object()


@functools.lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    data = yaml.safe_load(TABLE.read_text())
    assert isinstance(data, list), f"{TABLE.name} must be a list of rows"
    return tuple(data)


@functools.cache
def resolved(preset: str, stage: str) -> dict:
    """The preset's config for `stage`, as `regbench config show PRESET --stage STAGE` prints it."""
    return to_dict(load_config(PRESET_DIR / f"{preset}.yaml", stage=stage))


@functools.lru_cache(maxsize=1)
def default_config() -> dict:
    return to_dict(load_config())


def lookup(cfg: dict, dotted: str):
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def binds(row: dict, preset: str) -> bool:
    return row["datasets"] in ("both", PRESETS[preset][0])


def same(got, want) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15)
    return got == want


def name(row: dict) -> str:
    return f"{row['file']}: {row['key']}"


def test_rows_are_well_formed():
    problems = []
    for row in rows():
        for k in ("file", "key", "official", "stage", "datasets", "status"):
            if k not in row:
                problems.append(f"{row.get('file')}: {row.get('key')}: no '{k}'")
        if row.get("status") not in STATUSES:
            problems.append(f"{name(row)}: status {row.get('status')!r} is not one of {STATUSES}")
            continue
        if row["stage"] not in STAGES + EVERY_STAGE:
            problems.append(f"{name(row)}: stage {row['stage']!r}")
        if row["datasets"] not in DATASETS:
            problems.append(f"{name(row)}: datasets {row['datasets']!r}")
        for k in REQUIRED[row["status"]]:
            if not row.get(k):
                problems.append(f"{name(row)}: a {row['status']} row needs '{k}'")
        if row["status"] == "matched" and not (row.get("field") or row.get("code")):
            problems.append(f"{name(row)}: a matched row needs 'field' (checked) or 'code' (where it is fixed)")
        if row.get("field") and row["status"] in ("matched", "pending") and "expect" not in row:
            problems.append(f"{name(row)}: a {row['status']} row with a field needs 'expect'")
        for extra in row.get("also", []):
            if row["status"] != "matched" or extra.get("stage") not in STAGES or not extra.get("field") \
                    or "expect" not in extra:
                problems.append(f"{name(row)}: 'also' entries are stage / field / expect of a matched row")
        if row.get("code") and not (ROOT / row["code"]).is_file():
            problems.append(f"{name(row)}: code {row['code']} is not a file of this repository")
        if row["file"] not in OFFICIAL_FILES and row["file"] not in CODE_FILES:
            problems.append(f"{name(row)}: not an official file this table covers")
        per_file = {"mimic_": "mimic", "iuxray_": "iuxray"}
        base = row["file"].rsplit("/", 1)[-1]
        for marker, ds in per_file.items():
            if marker in base and row["datasets"] != ds:
                problems.append(f"{name(row)}: a {ds} file's row binds {row['datasets']}")
    assert not problems, "\n".join(problems)


def test_every_official_key_has_exactly_one_row():
    counts = Counter((r["file"], r["key"]) for r in rows())
    dup = sorted(k for k, n in counts.items() if n > 1)
    assert not dup, f"duplicate (file, key): {dup}"
    per_file = Counter(r["file"] for r in rows() if r["file"] in OFFICIAL_FILES)
    wrong = {f: (per_file.get(f, 0), n) for f, n in OFFICIAL_FILES.items() if per_file.get(f, 0) != n}
    assert not wrong, f"rows per official file (table, file) differ: {wrong}"
    for f in OFFICIAL_FILES:  # a key is a leaf: none is a prefix of another key of the same file
        keys = {r["key"] for r in rows() if r["file"] == f}
        inner = sorted(k for k in keys if any(o.startswith(k + ".") for o in keys))
        assert not inner, f"{f}: {inner} are both leaves and sections"


def test_every_field_named_is_a_config_field():
    """`differs` options and `matched` fields are real fields; `pending` ones may not exist yet."""
    cfg = default_config()
    problems = []
    for row in rows():
        for field in [row.get("field")] + [e.get("field") for e in row.get("also", [])]:
            if row["status"] == "matched" and field and lookup(cfg, field) is _MISSING:
                problems.append(f"{name(row)}: field {field} is not a config field")
        if row["status"] == "differs" and lookup(cfg, row["option"]) is _MISSING:
            problems.append(f"{name(row)}: option {row['option']} is not a config field")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_paper_preset_resolves_to_the_official_value(preset, stage):
    cfg = resolved(preset, stage)
    size = PRESETS[preset][1]
    checked, problems = 0, []
    for row in rows():
        if row["status"] != "matched" or not binds(row, preset):
            continue
        main = [row] if row.get("field") else []
        for bound in main + row.get("also", []):
            if bound["stage"] != stage and bound["stage"] not in EVERY_STAGE:
                continue
            want = bound["expect_3b"] if size == "3b" and "expect_3b" in bound else bound["expect"]
            got = lookup(cfg, bound["field"])
            checked += 1
            if got is _MISSING or not same(got, want):
                problems.append(f"{name(row)} = {row['official']!r}: {bound['field']} resolves to "
                                f"{'(missing)' if got is _MISSING else repr(got)}, expected {want!r}")
    assert not problems, f"{preset} --stage {stage}:\n" + "\n".join(problems)
    assert checked, f"no row checked for {preset} --stage {stage}"


def _pending_options() -> list[str]:
    return sorted({r["option"] for r in rows() if r["status"] == "pending"})


@pytest.mark.parametrize("option", _pending_options())
def test_pending_option(option):
    keys = [name(r) for r in rows() if r["status"] == "pending" and r["option"] == option]
    pytest.skip(f"pending option {option} ({len(keys)} rows, e.g. {keys[0]}): flip to matched when it is merged")


@pytest.mark.parametrize("key", [name(r) for r in rows() if r["status"] == "open"])
def test_open_difference(key):
    row = next(r for r in rows() if name(r) == key)
    pytest.skip(f"open difference, no option covers it yet: {row['note'][:160]}")
