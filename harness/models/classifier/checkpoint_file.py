"""Reading a classifier checkpoint from disk: a local file of tensors (safetensors, or a torch file read with
weights_only) or a classifier folder, never unpickling code. Below model.py and medical_mae.py, which both read
files through it."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

# The weights file of a classifier folder (storage.py: save_classifier writes it).
WEIGHTS_FILE = "classifier.safetensors"


def read_state_dict(path: str | os.PathLike[str], key: str = "classifier.pretrained_path",
                    allow_namespace: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of a local checkpoint (safetensors, or a torch file read with weights_only=True: a pickled
    object is refused, never executed), or of a classifier folder written by `regbench classifier train` (its
    classifier.safetensors: IU-Xray's classifier starts from MIMIC-CXR's, study field `upstream`); errors name
    `key`, the file and the fix. `allow_namespace`: an argparse.Namespace may sit beside the tensors (MAE /
    Medical-MAE save their command line as "args")."""
    path = Path(path)
    if path.is_dir() and (path / WEIGHTS_FILE).is_file():
        path = path / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"'{key}' = '{path}': file not found")
    fix = ("save the backbone as safetensors (safetensors.torch.save_file(model.state_dict(), 'x.safetensors')) or "
           "as a plain state dict of tensors (torch.save(model.state_dict(), 'x.pth'))")
    try:
        if path.suffix == ".safetensors":
            # lazy: its ImportError is handled here
            from safetensors.torch import load_file

            state: Any = load_file(str(path))
        else:
            # lazy: its ImportError is handled here
            import argparse

            with torch.serialization.safe_globals([argparse.Namespace] if allow_namespace else []):
                state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # torch's own text would suggest weights_only=False: not shown
        raise ValueError(f"'{key}' = '{path}': the file holds pickled Python objects besides tensors, which are "
                         f"never loaded (they could run code); {fix}") from e
    except Exception as e:  # noqa: BLE001 - safetensors and torch raise many types for a damaged file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"'{key}' = '{path}': not a readable checkpoint ({type(e).__name__}: {first[:160]}); "
                         f"{fix}") from e
    # MAE-style checkpoints wrap the weights ({"model": ...}); Lightning/others use "state_dict".
    for wrapper in ("model", "state_dict", "module"):
        if isinstance(state, dict) and wrapper in state and isinstance(state[wrapper], dict):
            state = state[wrapper]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"'{key}' = '{path}': does not hold a state dict of tensors; {fix}")
    # DDP / torch.compile prefixes.
    out = {}
    for name, value in state.items():
        for prefix in ("module.", "_orig_mod."):
            if name.startswith(prefix):
                name = name[len(prefix):]
        out[name] = value
    return out
