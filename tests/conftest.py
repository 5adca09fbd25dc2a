"""Shared fixtures. Real models are loaded once per session."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def minilm():
    pytest.importorskip("torch", reason="the real encoder is an extra (dsonet[encoder]); the core job has no torch")
    from dsonet.encoders import minilm

    return minilm()
