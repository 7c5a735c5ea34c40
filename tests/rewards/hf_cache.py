"""Pointing transformers' own copies of the hub settings at a test's caches, on transformers 4.x and 5.x."""

from __future__ import annotations


def patch_transformers_hub(monkeypatch, offline: bool, cache: str | None = None) -> None:
    """transformers 4.x captured the hub cache (``TRANSFORMERS_CACHE``) and the offline flag (``_is_offline_mode``)
    at import; 5.x has neither and reads huggingface_hub's constants, which the tests patch themselves."""
    import transformers.utils.hub as transformers_hub

    if cache is not None and hasattr(transformers_hub, "TRANSFORMERS_CACHE"):
        monkeypatch.setattr(transformers_hub, "TRANSFORMERS_CACHE", cache)
    if hasattr(transformers_hub, "_is_offline_mode"):
        monkeypatch.setattr(transformers_hub, "_is_offline_mode", offline)
