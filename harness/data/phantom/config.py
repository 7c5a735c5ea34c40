"""What to generate: the phantom set's size, seed, image size, splits and finding rates."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.constants import MIN_IMAGE_SIZE  # the smallest image side the drawing is made for
from harness.data.phantom.phrasings import VARIATIONS
from harness.data.phantom.vocabulary import FINDINGS, default_rates

# What the generator draws for a given config and seed. Bump it with any change to the cases, reports or images
# (the cached sets and the stage-0 bases are keyed on it, so a changed generator never reuses a stale set).
# 2: small findings drawn 1.5-4x larger (nodules, pleural thickening, rib fractures, atelectasis, thin device
#    lines, mild effusion, mild pneumothorax; opacity brighter): at 128 px they were 1-3 px wide (issue 12,
#    docs/calibration.md).
GENERATOR_VERSION = 2


@dataclass
class PhantomConfig:
    """What to generate. Rates are probabilities; ``finding_rates`` apply within abnormal cases.

    The defaults give about 28% No Finding cases and two or more findings in about half of all cases.
    A finding left out of ``finding_rates`` never occurs.
    """

    n: int = 1000
    seed: int = 0
    image_size: int = 128
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    normal_fraction: float = 0.3  # cases drawn with no finding (support devices still possible)
    finding_rates: dict[str, float] = field(default_factory=default_rates)
    device_rate: float = 0.18
    uncertain_rate: float = 0.12  # chance that the report hedges a present finding (labelled -1)
    negation_rate: float = 0.55  # chance that the report explicitly negates a given absent finding
    id_prefix: str = "phantom"
    # How much the report language varies (harness/data/phantom/phrasings.py LEVELS): "none" = the plain grammar
    # (phrases.py, the sets of every earlier study, byte for byte), "low" / "high" (issue 44).
    report_variation: str = "none"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"PhantomConfig.n must be >= 1, got {self.n}")
        if self.seed < 0:
            raise ValueError(f"PhantomConfig.seed must be >= 0, got {self.seed}")
        if self.image_size < MIN_IMAGE_SIZE:
            raise ValueError(f"PhantomConfig.image_size must be >= {MIN_IMAGE_SIZE}, got {self.image_size}")
        fractions = tuple(float(f) for f in self.split_fractions)
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(
                f"PhantomConfig.split_fractions must be 3 non-negative numbers summing to 1, got {fractions}"
            )
        self.split_fractions = fractions
        for name in ("normal_fraction", "device_rate", "uncertain_rate", "negation_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PhantomConfig.{name} must be in [0, 1], got {value}")
        unknown = sorted(set(self.finding_rates) - set(FINDINGS))
        if unknown:
            raise ValueError(f"PhantomConfig.finding_rates has unknown findings {unknown}; known: {FINDINGS}")
        for name, rate in self.finding_rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"PhantomConfig.finding_rates[{name!r}] must be in [0, 1], got {rate}")
        if self.normal_fraction < 1.0 and not any(self.finding_rates.values()):
            raise ValueError("PhantomConfig.finding_rates are all zero but normal_fraction < 1")
        if self.report_variation not in VARIATIONS:
            raise ValueError(f"PhantomConfig.report_variation must be one of {VARIATIONS}, got "
                             f"{self.report_variation!r}")
        if not self.id_prefix or not self.id_prefix.replace("_", "").isalnum():
            raise ValueError(f"PhantomConfig.id_prefix must be alphanumeric/underscore, got {self.id_prefix!r}")
