"""A private certificate authority for a cluster's TLS (`dso cluster up --tls`).

One self-signed CA signs one certificate for the servers (valid for the listen address,
``localhost`` and 127.0.0.1, for serving clients and for the routes between servers, which
verify each other) and, on request, client certificates for mutual TLS. Private keys are
written 0600. Real sites may use their own CA instead: the node side only needs the CA file.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dsonet.network.auth import write_secret

VALID_DAYS = 825  # the longest a TLS client accepts for a server certificate


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def make_ca(directory: Path, name: str = "dsonet cluster CA") -> CertFiles:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, "ca", cert, key)


def issue(ca: CertFiles, directory: Path, name: str, hosts: list[str] = ()) -> CertFiles:
    """A certificate signed by ``ca`` for ``name``; with ``hosts`` it serves them (and may be a route's client)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if hosts else [])
    builder = (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    return _write(directory, name, builder.sign(ca_key, hashes.SHA256()), key)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew between sites
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(directory: Path, stem: str, cert: x509.Certificate, key) -> CertFiles:
    directory.mkdir(parents=True, exist_ok=True)
    files = CertFiles(directory / f"{stem}.pem", directory / f"{stem}-key.pem")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_secret(files.key, pem.decode().strip())
    return files
