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


class StandInChats:
    """A chat model that answers each chat with its last message's length and counts the chats it was asked.
    Only for tests whose subject is what sits around a model (a cache, a replay), never the model."""

    name = "stand-in"

    def __init__(self):
        self.asked = 0

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        from dsonet.learn.chat import Completion

        self.asked += len(chats)
        return [Completion((str(len(c[-1]["content"])),) * n, 5, 3 * n) for c in chats]


@pytest.fixture
def stand_in_chats():
    return StandInChats()
