"""Fixtures shared by the reward tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def network_attempts(monkeypatch) -> list:
    """Refuse every connection and record the attempts."""
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts
