"""Shared fixtures. Real models are loaded once per session."""

import importlib.util
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2: sentence-transformers where torch is installed, else the core's numpy
    copy (`dsonet.encoders.minilm_numpy`: the same model and id), so the core job runs these too."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        from dsonet.encoders.minilm_numpy import numpy_minilm

        return numpy_minilm()
    from dsonet.encoders import minilm

    return minilm()
