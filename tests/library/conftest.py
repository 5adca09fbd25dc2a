import pytest

from dsonet.codec import Profile
from dsonet.identity import NodeIdentity
from lib_helpers import DIM, HashEncoder


@pytest.fixture
def profile():
    return Profile(DIM, DIM, "test:hash")


@pytest.fixture
def encoder():
    return HashEncoder()


@pytest.fixture(scope="session")
def identity():
    return NodeIdentity.generate()
