"""A node's identity: an Ed25519 key pair. The node id is sha256 of the raw public key.

The papers name nodes by hash; a hash alone authenticates nothing, so every batch is
signed and carries the public key, and receivers check sha256(public key) == node id.

A key file others can read is refused, as ssh refuses such a private key: whoever read it can
sign as this node. `chmod 600` it, or set DSONET_ALLOW_READABLE_KEY=1 to use it anyway.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dsonet.errors import DsoError


ALLOW_READABLE = "DSONET_ALLOW_READABLE_KEY"  # set to 1: use a key file group or others can read


class IdentityError(DsoError):
    """A key file that is missing, unreadable, readable by others, or not an Ed25519 private key."""


def check_key_mode(path: Path) -> None:
    """Raise `IdentityError` where a key file's group or others have any access (ssh's rule)."""
    mode = path.stat().st_mode & 0o777
    if os.name == "posix" and mode & 0o077 and os.environ.get(ALLOW_READABLE) != "1":
        raise IdentityError(f"{path} has mode {mode:04o}: others than its owner may read this node's private key; "
                            f"chmod 600 {path} (or set {ALLOW_READABLE}=1 to use it as it is)")


def node_id_of(public_key: bytes) -> str:
    return hashlib.sha256(public_key).hexdigest()


def verify_signature(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
        return True
    except (InvalidSignature, ValueError):
        return False


@dataclass(frozen=True)
class NodeIdentity:
    private_key: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> "NodeIdentity":
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> "NodeIdentity":
        """Deterministic identity (for simulations and tests): sha256(seed) is the private key."""
        return cls(Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed).digest()))

    @property
    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def node_id(self) -> str:
        return node_id_of(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    def save(self, path: str | Path) -> Path:
        """Write the private key as PEM, readable by the owner only (mode 0600)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        os.chmod(path, 0o600)  # O_CREAT's mode does not apply to a file that already existed
        return path

    @classmethod
    def load(cls, path: str | Path) -> "NodeIdentity":
        path = Path(path)
        try:
            check_key_mode(path)
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except FileNotFoundError:
            raise IdentityError(f"no key file at {path}; create one with `dso keygen {path}`") from None
        except ValueError as exc:
            raise IdentityError(f"{path} is not a PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise IdentityError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
        return cls(key)

    @classmethod
    def load_or_create(cls, path: str | Path) -> "NodeIdentity":
        path = Path(path)
        if path.exists():
            return cls.load(path)
        ident = cls.generate()
        ident.save(path)
        return ident
