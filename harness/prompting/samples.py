"""The RL engine's input: the samples it draws prompts from and validates on, as plain lists. The stages build one
(harness/stages/prompts.py: prompt_set); the engine and the benchmarks only read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PromptSet:
    """What the RL loop samples from and validates on: per sample its id, views, instruction and reference report."""

    ids: list[str]
    images: list  # per sample: list of PIL views
    instructions: list[str]
    references: list[str]

    def __len__(self) -> int:
        return len(self.ids)
