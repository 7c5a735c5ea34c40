"""What a stage run will need that the repository does not hold, and whether it is here.

`stage_needs(cfg, stage)` is a pure function of the resolved config: the scorers whose weights the stage will
load (CheXbert, RadGraph), the base model folder, the classifier checkpoint and vLLM. `problem(need)` checks one:
its files are present and, where that is cheap, of the right kind (a torch checkpoint non-empty, a zip archive or
a pickle), without loading any weights. `check_needs(cfg, stage)` refuses, with one line naming the file and how
to get it, the first required need that is absent. Preflight runs it before a command decodes, trains or writes
(harness/checks/preflight.py: check_scorers, from every stage command, `begin_stage` and `evaluate_model`), and
`regbench experiment run` for every stage run it is about to start (a test evaluation that needs CheXbert is
refused before the hours of training that come first); `regbench doctor` lists them.

Which stage needs what (the stage names of the pipeline, and "eval"):
- eval: CheXbert when `eval.ce_backend=chexbert`; RadGraph `eval.radgraph_model` when `eval.radgraph=required`.
  With `eval.radgraph=auto` (the default and the paper presets') RadGraph F1 is reported when its weights are
  present and marked missing otherwise (harness/stages/evaluate.py: clinical_scores): listed, never refused.
  vLLM when `generation.backend=vllm`. (The model is `--model`, not a config field: the command checks it.)
- rl: the scorers of `rl.reward` (rewards/spec.py: reward_scorers; a weighted sum lists its parts) and of the
  validation's RG term (`rl.val_rg_metric=radgraph`: the radgraph_f1 reward, radgraph-xl); vLLM when
  `generation.backend=vllm`; the base model when it starts from none (no init_from).
- warmup, sft: the base model (no init_from); sft also `classifier.dir`.
- classifier: `classifier.pretrained_path` when set.
The tiny preset's base is built by stage 0, so it is no need.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.config import ConfigError, RunConfig
from harness.config.presets import get_preset
from rewards.chexbert import check_chexbert_files
from rewards.radgraph import RADGRAPH_HUB_REPO, check_radgraph_files
from rewards.spec import reward_scorers

# What check_scorers (preflight) checks; the base model and the classifier are check_inputs'
# (harness/checks/preflight.py), which looks at them after the data's own checks.
SCORER_KINDS = ("chexbert", "radgraph", "vllm")
KINDS = (*SCORER_KINDS, "base_model", "classifier_dir", "classifier_weights")


@dataclass(frozen=True)
class Need:
    """One thing a stage will load: `kind` (KINDS), `target` (the RadGraph model type, a path, or the device
    vLLM runs on), the config key asking for it and that key's value, and whether its absence refuses the run."""

    kind: str
    target: str | None
    key: str
    value: object
    required: bool = True

    @property
    def label(self) -> str:
        names = {"chexbert": "CheXbert", "radgraph": f"RadGraph {self.target}", "vllm": "vLLM",
                 "base_model": f"base model {self.target}", "classifier_dir": f"classifier folder {self.target}",
                 "classifier_weights": f"classifier checkpoint {self.target}"}
        return names[self.kind]


# -------------------------------------------------------------------------------------------------- what
def scorer_need(name: str, key: str, value: object) -> Need:
    """The need of one scorer name (a reward's `scorers`, rewards/spec.py)."""
    if name == "chexbert":
        return Need("chexbert", None, key, value)
    if name in ("radgraph", "radgraph-xl"):
        return Need("radgraph", name, key, value)
    raise ConfigError(f"'{key}' = {value!r} uses the scorer '{name}', which regbench cannot check; known scorers: "
                      "chexbert, radgraph, radgraph-xl")


def _reward_needs(spec: object, key: str) -> list[Need]:
    try:
        names = reward_scorers(spec)
    except ValueError as e:
        raise ConfigError(f"'{key}' = {spec!r} is not a usable reward: {e}") from e
    return [scorer_need(name, key, spec) for name in names]


def _base_need(cfg: RunConfig) -> list[Need]:
    """The base model a model stage loads, unless it starts from a stage's model (whose spec names its base,
    checked with it) or is the tiny preset's (stage 0 builds it); `model.path` set beside init_from is loaded too."""
    if cfg.init_from:
        return [Need("base_model", str(cfg.model.path), "model.path", cfg.model.path)] if cfg.model.path else []
    path = cfg.model.path or (None if cfg.model.preset == "tiny" else get_preset(cfg.model.preset).default_path)
    return [Need("base_model", str(path), "model.path", path)] if path else []


def stage_needs(cfg: RunConfig, stage: str | None) -> list[Need]:
    """What the stage run of `cfg` will load from outside the repository (module docstring), in the order it is
    checked. Reads no file; resolves `rl.reward`'s names (rewards/spec.py)."""
    needs: list[Need] = []
    if stage in ("warmup", "sft", "rl"):
        needs += _base_need(cfg)
    if stage == "sft":
        needs.append(Need("classifier_dir", cfg.classifier.dir, "classifier.dir", cfg.classifier.dir))
    if stage == "classifier" and cfg.classifier.pretrained_path:
        needs.append(Need("classifier_weights", cfg.classifier.pretrained_path, "classifier.pretrained_path",
                          cfg.classifier.pretrained_path))
    if stage in ("warmup", "sft") and cfg.train.handoff == "best_val" and cfg.rl.val_rg_metric == "radgraph":
        # the epochs' validation (harness/stages/handoff.py) scores with RL's validation score, RG term included
        needs += [Need(n.kind, n.target, "rl.val_rg_metric", "radgraph") for n in _reward_needs("radgraph_f1", "")]
    if stage == "rl":
        needs += _reward_needs(cfg.rl.reward, "rl.reward")
        if cfg.rl.val_rg_metric == "radgraph":  # harness/stages/rl.py: score_validation's RG term
            needs += [Need(n.kind, n.target, "rl.val_rg_metric", "radgraph") for n in _reward_needs("radgraph_f1", "")]
    if stage == "eval":
        if cfg.eval.ce_backend == "chexbert":
            needs.append(Need("chexbert", None, "eval.ce_backend", "chexbert"))
        if cfg.eval.radgraph != "off":
            needs.append(Need("radgraph", cfg.eval.radgraph_model, "eval.radgraph", cfg.eval.radgraph,
                              required=cfg.eval.radgraph == "required"))
    if stage in ("rl", "eval") and cfg.generation.backend == "vllm":
        needs.append(Need("vllm", cfg.model.device, "generation.backend", "vllm"))
    return needs


# -------------------------------------------------------------------------------------------------- whether
def torch_file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be a torch.save checkpoint (empty; neither a zip archive nor a pickle), or None. Reads
    its first bytes only."""
    p = Path(path)
    if p.stat().st_size == 0:
        return f"{p} is empty (an interrupted download or copy?)"
    with p.open("rb") as f:
        head = f.read(2)
    if head != b"PK" and head[:1] != b"\x80":
        return f"{p} is not a torch checkpoint (neither a zip archive nor a pickle)"
    return None


def _chexbert_problem() -> str | None:
    path = check_chexbert_files()  # FileNotFoundError: the exact path f1chexbert reads and how to fill it
    bad = torch_file_problem(path)
    return f"{bad}; replace it with 'chexbert.pth' of the Hugging Face repository 'StanfordAIMI/RRG_scorers'" \
        if bad else None


def _radgraph_problem(model_type: str) -> str | None:
    model_dir = check_radgraph_files(model_type, extract=False)  # reads only; FileNotFoundError says what to do
    weights = model_dir / "weights.th"
    bad = torch_file_problem(weights) if weights.is_file() else None
    if bad:
        return (f"{bad}; extract '{model_type}.tar.gz' of the Hugging Face repository '{RADGRAPH_HUB_REPO}' into "
                f"{model_dir} again")
    return None


def _vllm_problem(device: str | None) -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "the vllm package is not installed here (pip install vllm); or use generation.backend=lean"
    # lazy: start-up cost (torch)
    import torch

    if (device or "auto") == "cpu" or not torch.cuda.is_available():
        return f"vLLM runs on a CUDA GPU, and model.device = {device!r} is none here; use generation.backend=lean"
    return None


def _path_problem(need: Need) -> str | None:
    """The base model and classifier files, as harness/checks/preflight.py's check_inputs checks them (without importing
    it: preflight imports this module)."""
    if need.kind == "classifier_dir":
        # lazy: start-up cost (torch)
        from harness.models.classifier.storage import read_classifier_meta

        if not need.target:
            return "stage 2 (sft) needs it: the folder written by `regbench classifier train`"
        if not Path(need.target).is_dir():
            return f"{need.target}: folder not found (the folder written by `regbench classifier train`)"
        read_classifier_meta(need.target)  # FileNotFoundError / ValueError name the file
        return None
    if need.kind == "classifier_weights":
        p = Path(need.target)
        if p.is_dir():  # a classifier folder of `regbench classifier train` (an upstream study's, issue 42)
            p = p / "classifier.safetensors"
        if not p.is_file():
            return f"{p}: file not found (a pretrained backbone checkpoint, .safetensors)"
        return f"{p} is empty" if p.stat().st_size == 0 else None
    # lazy: start-up cost (torch)
    from harness.models.checkpoint import _is_hub_id, check_base_folder, local_model_folder

    target = Path(need.target)
    if not target.exists() and not _is_hub_id(need.target):
        return (f"{target}: folder not found (a local Hugging Face model folder: config.json and *.safetensors; "
                f"e.g. `huggingface-cli download REPO --local-dir {target}`)")
    # A hub id only from the local cache (never a download); then config.json and weights in the folder.
    check_base_folder(local_model_folder(need.target, need.key), need.key)
    return None


def problem(need: Need) -> str | None:
    """Why `need` is not met here (one line: the missing or bad file and how to get it), or None. Checks files
    only: no weights are loaded, nothing is downloaded or written."""
    try:
        if need.kind == "chexbert":
            return _chexbert_problem()
        if need.kind == "radgraph":
            return _radgraph_problem(need.target)
        if need.kind == "vllm":
            return _vllm_problem(need.target)
        return _path_problem(need)
    except (FileNotFoundError, ConfigError) as e:
        return str(e)
    except ImportError as e:  # the scorer's package itself
        return f"its package cannot be imported ({e}); install regbench's pinned requirements"
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:  # e.g. an unreadable RadGraph config.json
        return f"{type(e).__name__}: {e}"


def describe(need: Need, detail: str) -> str:
    """The one line of a need that is not met: the key asking for it, what, and `detail` (its problem)."""
    detail = " ".join(detail.split())
    if detail.startswith(f"'{need.key}'"):  # preflight's own messages name the key already
        return detail
    return f"'{need.key}' = {need.value!r} needs {need.label}: {detail}"


def check_needs(cfg: RunConfig, stage: str | None, kinds: Iterable[str] | None = None,
                produced_under: str | Path | None = None) -> None:
    """Refuse (ConfigError, one line) the first required need of the stage (of `kinds`, default all) that is not
    met here. `produced_under`: a folder whose files are outputs of earlier runs of the same plan (a study's
    stages folder: an upstream classifier, a model handed on), not checked here: they do not exist yet."""
    kinds = tuple(kinds) if kinds is not None else KINDS
    later = Path(produced_under).resolve() if produced_under is not None else None
    for need in stage_needs(cfg, stage):
        if later is not None and need.target and _is_under(need.target, later):
            continue
        if need.required and need.kind in kinds:
            detail = problem(need)
            if detail:
                raise ConfigError(describe(need, detail))


def _is_under(target: str, folder: Path) -> bool:
    try:
        return Path(target).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False
