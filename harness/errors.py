"""Errors every layer may raise (below the config, the models and the stages, which all name them)."""


class ConfigError(ValueError):
    """A configuration value, key, file or folder is invalid; the message names it and says what to do."""
