"""Holding huggingface_hub and transformers to local files while a metric package loads its model."""

from __future__ import annotations

import contextlib


def hub_cache_dir() -> str:
    """The Hugging Face hub cache transformers reads models from.

    transformers 4.x names it ``transformers.utils.hub.TRANSFORMERS_CACHE``; 5.x dropped that name and reads
    ``huggingface_hub.constants.HF_HUB_CACHE`` directly (the value 4.x's name defaults to).
    """
    # lazy: start-up cost (huggingface_hub, transformers)
    import huggingface_hub.constants as hub_constants
    import transformers.utils.hub as transformers_hub

    return str(getattr(transformers_hub, "TRANSFORMERS_CACHE", None) or hub_constants.HF_HUB_CACHE)


@contextlib.contextmanager
def hub_offline():
    """Keep huggingface_hub and transformers on local files while a package loads (its files were checked first).

    Without this, outside HF_HUB_OFFLINE=1 they would ask the Hub whether the cached config / tokenizer are
    current: a network request at run time, which regbench never makes. It flips two process-wide settings for
    the duration of the block. (transformers 5.x has no flag of its own: it asks huggingface_hub's.)
    """
    # lazy: start-up cost (huggingface_hub, transformers)
    import huggingface_hub.constants as hub_constants
    import transformers.utils.hub as transformers_hub

    saved = hub_constants.HF_HUB_OFFLINE, getattr(transformers_hub, "_is_offline_mode", None)
    hub_constants.HF_HUB_OFFLINE = True
    if saved[1] is not None:
        transformers_hub._is_offline_mode = True
    try:
        yield
    finally:
        hub_constants.HF_HUB_OFFLINE = saved[0]
        if saved[1] is not None:
            transformers_hub._is_offline_mode = saved[1]
