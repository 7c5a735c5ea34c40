"""Errors every layer may raise (below the config, the models and the stages, which all name them)."""


class ConfigError(ValueError):
    """A configuration value, key, file or folder is invalid; the message names it and says what to do."""


class RunPruned(Exception):
    """A validation callback ends a run early on purpose (a search prunes a weak trial). Not a failure: the
    experiment runner records the stage as `pruned` with `reason`, and the search reads that status."""

    def __init__(self, reason: str, step: int | None = None, score: float | None = None):
        super().__init__(reason)
        self.reason, self.step, self.score = reason, step, score
