"""Test certificates, generated per test session (never checked in, never expired).

``make_pki(dir)`` writes a CA, a server certificate for ``localhost`` and
``127.0.0.1`` and a client certificate (CN ``client``), all signed by the
CA, valid from yesterday for 30 days.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class PKI:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_cert: str  # a client cert signed by another CA
    other_key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, ca: bool = False, sans=None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> PKI:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("nsq test CA", ca_key, _name("nsq test CA"), ca_key, ca=True)
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, cn, sans, issuer, issuer_key in (
        ("server", "localhost", [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
         ca, ca_key),
        ("client", "client", None, ca, ca_key),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(cn, key, issuer.subject, issuer_key, sans=sans)
        (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, directory / f"{name}.key")
    other_ca_key = ec.generate_private_key(ec.SECP256R1())
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert("stranger", other_key, _name("other CA"), other_ca_key)
    (directory / "other.pem").write_bytes(other.public_bytes(serialization.Encoding.PEM))
    _write_key(other_key, directory / "other.key")
    d = str(directory)
    return PKI(f"{d}/ca.pem", f"{d}/server.pem", f"{d}/server.key", f"{d}/client.pem", f"{d}/client.key",
               f"{d}/other.pem", f"{d}/other.key")
