import pytest


@pytest.fixture(scope="session")
def default_encoder():
    """The default encoder, loaded once; its first use on a machine trains the head (minutes)."""
    from dsonet.encoders import default_encoder

    return default_encoder()
