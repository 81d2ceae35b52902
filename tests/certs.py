"""Certificates the tests make: a CA and the leaf certificates it signs (PEM), for mTLS tests."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Authority:
    """A CA: its key signs leaf certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(common_name: str = "agentmesh test CA") -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def issue(ca: Authority, common_name: str) -> tuple[bytes, bytes, int]:
    """(certificate PEM, key PEM, serial) of a leaf for localhost/127.0.0.1, usable as server and client."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem, serial


def write_leaf(ca: Authority, common_name: str, directory: Path) -> dict[str, Any]:
    """Writes ca.pem, <name>.pem and <name>.key into `directory`; returns the `tls` settings for them."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key, _ = issue(ca, common_name)
    (directory / "ca.pem").write_bytes(ca.pem)
    (directory / f"{common_name}.pem").write_bytes(cert)
    (directory / f"{common_name}.key").write_bytes(key)
    return {
        "enabled": True,
        "ca_file": str(directory / "ca.pem"),
        "cert_file": str(directory / f"{common_name}.pem"),
        "key_file": str(directory / f"{common_name}.key"),
    }


def swap_leaf(ca: Authority, common_name: str, cert_file: Path, key_file: Path) -> int:
    """Replaces a certificate and its key the way cert-manager and kubelet do (write aside, rename);
    returns the new serial."""
    cert, key, serial = issue(ca, common_name)
    for path, data in ((key_file, key), (cert_file, cert)):
        aside = path.with_suffix(path.suffix + ".new")
        aside.write_bytes(data)
        aside.replace(path)
    return serial
