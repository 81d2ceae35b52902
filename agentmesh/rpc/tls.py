"""mTLS for servers and channels, with certificates reloaded from their files (docs/design.md §9).

Off by default (`tls.enabled`): in a service mesh the sidecar does mTLS. When on:
- servers use grpc's dynamic server credentials: at each new handshake the fetcher looks at the
  files (three `stat`s) and, when they changed, serves the new certificate and trusts the new CA,
  without a restart; connections made before keep theirs. A half-written swap (a certificate with
  the old key) is not taken: the old pair stays until the files agree again;
- clients (`ReloadingCredentials`, used by `ServiceClients`) look at the files at most every
  `tls.reload_check_s`; when they changed, the next call gets a new channel presenting the new
  certificate, and the old channel closes after its calls finish;
- health and reflection are also served in plaintext on `server.health_port` (agentmesh.rpc.host),
  so kubelet's gRPC probes, which cannot present a client certificate, keep working;
- the HTTP listener (agentmesh.rpc.http) serves HTTPS with the same files and client-certificate rule
  (`http_server_context`), reloaded the same way: at each handshake after the files changed.

Certificates are PEM files: `ca_file` (the CA that signs every peer), `cert_file` (this process's
chain) and `key_file`.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agentmesh.config import ConfigError, Settings, TlsSettings

__all__ = [
    "ReloadingCredentials",
    "TlsFiles",
    "aio_channel",
    "channel_credentials",
    "http_server_context",
    "server_credentials",
    "sync_channel",
    "tls_channel_options",
]

log = logging.getLogger(__name__)

Fingerprint = tuple[tuple[int, int, int] | None, ...]


@dataclass(frozen=True)
class TlsMaterial:
    """The PEM bytes of one consistent set of files."""

    ca: bytes
    cert: bytes | None
    key: bytes | None


@dataclass
class TlsFiles:
    """The configured files: read them (checked), and tell whether they changed."""

    settings: TlsSettings
    paths: tuple[Path | None, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.paths = (self.settings.ca_file, self.settings.cert_file, self.settings.key_file)

    def fingerprint(self) -> Fingerprint:
        """(mtime, size, inode) of each file; a swap by rename changes the inode even in the same second."""
        result: list[tuple[int, int, int] | None] = []
        for path in self.paths:
            try:
                st = os.stat(path) if path is not None else None
            except OSError:
                st = None
            result.append((st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None)
        return tuple(result)

    def read(self) -> TlsMaterial:
        """The files' contents; ConfigError naming the file when one is unreadable or the key does not
        belong to the certificate."""
        ca_path, cert_path, key_path = self.paths
        if ca_path is None:
            raise ConfigError("tls.ca_file: required when tls.enabled")
        ca = _read(ca_path, "tls.ca_file")
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError:
            raise ConfigError(f"tls.ca_file: {ca_path} holds no PEM certificate") from None
        if cert_path is None or key_path is None:
            return TlsMaterial(ca, None, None)
        cert = _read(cert_path, "tls.cert_file")
        key = _read(key_path, "tls.key_file")
        _check_pair(cert, key, cert_path, key_path)
        return TlsMaterial(ca, cert, key)


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read {path}: {exc.strerror or exc}") from None


def _check_pair(cert: bytes, key: bytes, cert_path: Path, key_path: Path) -> None:
    try:
        leaf = x509.load_pem_x509_certificates(cert)[0]
    except ValueError:
        raise ConfigError(f"tls.cert_file: {cert_path} holds no PEM certificate") from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"tls.key_file: {key_path} holds no unencrypted PEM private key") from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(serialization.Encoding.DER, spki) != leaf.public_key().public_bytes(
        serialization.Encoding.DER, spki
    ):
        raise ConfigError(f"tls.key_file: {key_path} is not the key of the certificate in {cert_path}")


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """Server credentials that take new files at the next handshake after they change."""
    files = TlsFiles(tls)
    material = files.read()
    if material.cert is None or material.key is None:
        raise ConfigError("tls: a server needs tls.cert_file and tls.key_file")
    seen = files.fingerprint()

    def configuration(m: TlsMaterial) -> Any:
        assert m.cert is not None and m.key is not None
        return grpc.ssl_server_certificate_configuration([(m.key, m.cert)], root_certificates=m.ca)

    def fetch() -> Any:
        nonlocal seen
        current = files.fingerprint()
        if current == seen:
            return None  # grpc keeps the configuration it has
        try:
            fresh = files.read()
        except ConfigError as exc:
            # Mid-swap (one file new, one old) or a bad file: keep serving the old pair, look again next time.
            log.warning("TLS files changed but are not usable yet: %s", exc)
            return None
        seen = current
        log.warning("TLS certificate reloaded from %s", tls.cert_file)
        return configuration(fresh)

    return grpc.dynamic_ssl_server_credentials(
        configuration(material), fetch, require_client_authentication=tls.require_client_cert
    )


def _http_context(tls: TlsSettings, material: TlsMaterial) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    assert tls.cert_file is not None and tls.key_file is not None
    context.load_cert_chain(tls.cert_file, tls.key_file)
    context.load_verify_locations(cadata=material.ca.decode("ascii", "replace"))
    context.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    return context


def http_server_context(tls: TlsSettings) -> ssl.SSLContext:
    """The HTTP listener's server context: the gRPC port's certificate, CA and client-certificate rule,
    taking new files at the next handshake after they change (a half-written swap is not taken)."""
    files = TlsFiles(tls)
    material = files.read()
    if material.cert is None or material.key is None:
        raise ConfigError("tls: a server needs tls.cert_file and tls.key_file")
    outer = _http_context(tls, material)
    current, seen = outer, files.fingerprint()

    def at_handshake(connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        nonlocal current, seen
        fingerprint = files.fingerprint()
        if fingerprint != seen:
            try:
                current = _http_context(tls, files.read())
                seen = fingerprint
                log.warning("TLS certificate of the HTTP listener reloaded from %s", tls.cert_file)
            except (ConfigError, ssl.SSLError, OSError) as exc:
                log.warning("TLS files changed but are not usable yet: %s", exc)
        if current is not outer:
            connection.context = current

    # OpenSSL calls it for every ClientHello, with or without a server name.
    outer.sni_callback = at_handshake
    return outer


def channel_credentials(material: TlsMaterial) -> grpc.ChannelCredentials:
    """Client credentials: trust `ca`, present the certificate when there is one."""
    return grpc.ssl_channel_credentials(
        root_certificates=material.ca, private_key=material.key, certificate_chain=material.cert
    )


def tls_channel_options(tls: TlsSettings) -> list[tuple[str, Any]]:
    """Channel arguments TLS needs: the name to verify in the server's certificate, when configured."""
    return [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []


class ReloadingCredentials:
    """A client's credentials, rebuilt when the files change (looked at every `reload_check_s`)."""

    def __init__(self, tls: TlsSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.tls = tls
        self._files = TlsFiles(tls)
        self._clock = clock
        self._seen = self._files.fingerprint()
        self.credentials = channel_credentials(self._files.read())
        self._checked_at = clock()
        self.generation = 0
        """Bumped at each reload: a channel made under an older generation is replaced."""

    def refresh(self) -> bool:
        """Looks at the files when due; True when new credentials were built."""
        now = self._clock()
        if now - self._checked_at < self.tls.reload_check_s:
            return False
        self._checked_at = now
        current = self._files.fingerprint()
        if current == self._seen:
            return False
        try:
            material = self._files.read()
        except ConfigError as exc:
            log.warning("TLS files changed but are not usable yet: %s", exc)
            return False
        self._seen = current
        self.credentials = channel_credentials(material)
        self.generation += 1
        log.warning("TLS client certificate reloaded from %s", self.tls.cert_file)
        return True


def aio_channel(target: str, settings: Settings, **kwargs: Any) -> grpc.aio.Channel:
    """A bare grpc.aio channel to `target`: TLS when `tls.enabled` (CLI use; services use ServiceClients)."""
    tls = settings.tls
    if not tls.enabled:
        return grpc.aio.insecure_channel(target, **kwargs)
    options = [*kwargs.pop("options", []), *tls_channel_options(tls)]
    credentials = channel_credentials(TlsFiles(tls).read())
    return grpc.aio.secure_channel(target, credentials, options=options, **kwargs)


def sync_channel(target: str, settings: Settings) -> grpc.Channel:
    """A blocking channel to `target`, TLS when `tls.enabled` (health checks of the CLI)."""
    tls = settings.tls
    if not tls.enabled:
        return grpc.insecure_channel(target)
    credentials = channel_credentials(TlsFiles(tls).read())
    return grpc.secure_channel(target, credentials, options=tls_channel_options(tls))
