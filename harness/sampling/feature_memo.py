"""Vision features of a frozen policy kept across GRPO steps (issue 27).

Under a static reference the reference snapshot never changes, yet every step's reference pass encoded its
prompts' images again; a study's RL subset is a few hundred prompts, so after the first epoch every image has
been encoded under that snapshot already. `FeatureMemo` keeps the features of each image (keyed by what the
trainer knows identifies it: the prompt's index in the RL train set and the view) for one snapshot version
(harness/policy/snapshots.py: `SnapshotStore.version`), and forgets them all when that version changes (an EMA update,
a VAPR reset, a resumed checkpoint).

Same numbers: a memo is used only where the passes already encode each distinct image once
(harness/sampling/lean_prefill.py, `dedupe`: on the CPU, not in train mode), which rests on the vision encoder's
features of one image not depending on the other images of its batch; reading them from an earlier batch rests
on the same fact (tests/harness/sampling/test_feature_memo.py checks the features and a whole GRPO run bit for
bit).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

# Features kept per memo at most (float32 elements; 64 Mi = 256 MiB); past it, new images are encoded each time.
MAX_ELEMENTS = 64 * 2**20


class FeatureMemo:
    """Features [tokens, width] by image key, valid for one version of one snapshot."""

    def __init__(self, max_elements: int = MAX_ELEMENTS) -> None:
        self.version: object = None
        self.features: dict[Hashable, torch.Tensor] = {}
        self.max_elements = max_elements
        self.elements = 0
        self.hits = self.misses = 0

    def at(self, version: object) -> FeatureMemo:
        """This memo for snapshot version `version`: emptied if it held another version's features."""
        if version != self.version:
            self.features.clear()
            self.version, self.elements = version, 0
        return self

    def get(self, key: Hashable) -> torch.Tensor | None:
        found = self.features.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: Hashable, features: torch.Tensor) -> None:
        if self.elements + features.numel() > self.max_elements:
            return
        self.features[key] = features.detach()
        self.elements += features.numel()


class SnapshotFeatures:
    """One `FeatureMemo` per snapshot name (the trainer's frozen passes: "ref", "old")."""

    def __init__(self) -> None:
        self._memos: dict[str, FeatureMemo] = {}

    def memo(self, name: str, version: object) -> FeatureMemo:
        return self._memos.setdefault(name, FeatureMemo()).at(version)

    def counts(self) -> dict[str, tuple[int, int]]:
        """{snapshot name: (images read from its memo, images encoded)} over the run."""
        return {name: (m.hits, m.misses) for name, m in self._memos.items()}
