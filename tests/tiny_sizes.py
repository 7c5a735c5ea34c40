"""The tiny model and data sizes of the end-to-end tests, as dotted config overrides (seconds per stage).

One source: the `common` section of experiments/presets/smoke.yaml (the smoke preset a newcomer runs) is read
here, so the tests and the smoke study run at the same sizes."""

from pathlib import Path

import yaml

SMOKE_PRESET = Path(__file__).resolve().parents[1] / "experiments" / "presets" / "smoke.yaml"


def _dotted(section: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in section.items():
        if isinstance(value, dict):
            out += _dotted(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={value}")
    return out


TINY = _dotted(yaml.safe_load(SMOKE_PRESET.read_text())["common"])
