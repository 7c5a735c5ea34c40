"""W&B checked before a stage writes or decodes anything (issue 49): with `wandb` in `train.report_to` and W&B
online (WANDB_MODE not offline), the package must import, an API key must be there (WANDB_API_KEY or `wandb
login`'s ~/.netrc entry) and the W&B server must answer a TCP connection. Otherwise the stage is refused in one
line that names the cause and the way out, WANDB_MODE=offline: before, a missing key or network failed after
the first training step (a manifest, a step row and wandb/ left behind), or after 116 s of W&B's own retries."""

from __future__ import annotations

import configparser
import importlib.util
import netrc
import os
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from harness.config.names import tracker_names
from harness.errors import ConfigError

OFFLINE_MODES = ("offline", "disabled", "dryrun")
DEFAULT_BASE_URL = "https://api.wandb.ai"
CONNECT_TIMEOUT_S = 5.0
_REACHED: set = set()
OFFLINE_HINT = ("or set WANDB_MODE=offline to keep the W&B run in the run folder (`wandb sync RUN/wandb/offline-run-*` "
                "uploads it later), or train.report_to=tensorboard")


def _settings_mode() -> str:
    """The mode `wandb offline` / `wandb online` saved (./wandb/settings, then W&B's config folder)."""
    config_dir = os.environ.get("WANDB_CONFIG_DIR") or str(Path.home() / ".config" / "wandb")
    for path in (Path("wandb") / "settings", Path(config_dir) / "settings"):
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        if parser.has_option("default", "mode"):
            return parser.get("default", "mode").strip().lower()
    return ""


def wandb_mode() -> str:
    """W&B's mode as this process would run it: WANDB_MODE, WANDB_DISABLED, or the saved setting; '' is online."""
    if os.environ.get("WANDB_DISABLED", "").strip().lower() in ("1", "true", "yes"):
        return "disabled"
    return os.environ.get("WANDB_MODE", "").strip().lower() or _settings_mode()


def _has_api_key(host: str) -> bool:
    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def reachable(url: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to the server of `url` opens within `timeout`, else why not."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout):
            return None
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def check_wandb(report_to, connect: Callable[[str], str | None] = reachable) -> None:
    """Refuse (ConfigError) a W&B tracker that cannot log: see the module's text."""

    if "wandb" not in tracker_names(report_to):
        return
    if importlib.util.find_spec("wandb") is None:  # offline too: the tracker imports it
        raise ConfigError("'train.report_to' includes wandb but the wandb package is not installed: pip install wandb, "
                          "or train.report_to=tensorboard")
    if wandb_mode() in OFFLINE_MODES:
        return
    url = os.environ.get("WANDB_BASE_URL", "").strip() or DEFAULT_BASE_URL
    host = urlparse(url).hostname or url
    if not _has_api_key(host):
        raise ConfigError(f"'train.report_to' includes wandb but W&B is not logged in (no WANDB_API_KEY, no {host} "
                          f"entry in ~/.netrc): run `wandb login`, {OFFLINE_HINT}")
    if (url, connect) in _REACHED:  # one connection per process (a command checks its config more than once)
        return
    why = connect(url)
    if why is None:
        _REACHED.add((url, connect))
    else:
        raise ConfigError(f"'train.report_to' includes wandb but the W&B server {url} cannot be reached ({why}); "
                          f"check the network, {OFFLINE_HINT}")
