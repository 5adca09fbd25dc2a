"""Shared fixtures. Real models are loaded once per session."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def minilm():
    from dsonet.encoders import minilm

    return minilm()
