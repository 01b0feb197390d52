"""TLS contexts for nsqd's TCP upgrade and HTTPS listener (https://nsq.io/components/nsqd.html#tls;
Go: nsqd/nsqd.go ``buildTLSConfig``).

Go nsqd v1.2 rules: TLS is on when both ``--tls-cert`` and ``--tls-key``
are given; ``--tls-client-auth-policy`` ``require`` or ``require-verify``
asks clients for a certificate (and turns ``--tls-required`` on when it was
off); ``--tls-root-ca-file`` is the CA client certificates are checked
against; ``--tls-min-version`` is the oldest protocol accepted.

One difference: Go's ``require`` accepts any client certificate without
checking it; Python's ssl module cannot ask for a certificate without
verifying it, so ``require`` verifies against ``--tls-root-ca-file`` (or
the system CAs) like ``require-verify``.
"""

from __future__ import annotations

import ssl
import warnings

__all__ = ["TLSConfigError", "build_server_context", "tls_version_name", "peer_common_name", "MIN_VERSIONS"]

#: --tls-min-version values (Go's names) -> ssl.TLSVersion
MIN_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.MINIMUM_SUPPORTED,
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}

_VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}


class TLSConfigError(ValueError):
    """A TLS flag that cannot work (missing files, bad policy or version)."""


def tls_version_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str:
    """``TLS1.2`` as Go's /stats names the negotiated version ("" without TLS)."""
    if ssl_object is None:
        return ""
    version = ssl_object.version() or ""
    return _VERSION_NAMES.get(version, version)


def peer_common_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str:
    """The client certificate's subject CN (the last ``commonName`` of its
    subject, as Go's ``Subject.CommonName``); "" without TLS, without a
    certificate, or before the handshake is done."""
    if ssl_object is None:
        return ""
    try:
        cert = ssl_object.getpeercert()
    except ValueError:  # handshake not done
        return ""
    subject = cert.get("subject", ()) if cert else ()
    name = ""
    # subject: relative distinguished names, each a tuple of (key, value) pairs
    for rdn in subject if isinstance(subject, tuple) else ():
        for pair in rdn:
            if isinstance(pair, tuple) and pair[0] == "commonName":
                name = pair[1]
    return name


def build_server_context(cert: str, key: str, client_auth_policy: str = "", root_ca_file: str = "",
                         min_version: str = "tls1.0") -> ssl.SSLContext | None:
    """The server SSLContext, or None when TLS is off (no cert and no key).

    Raises:
        TLSConfigError: only one of cert/key, unreadable files, an unknown
            policy or minimum version.
    """
    if not cert and not key:
        return None
    if not cert or not key:
        raise TLSConfigError("failed to build TLS config - both --tls-cert and --tls-key are needed")
    if client_auth_policy not in ("", "require", "require-verify"):
        raise TLSConfigError(f"invalid --tls-client-auth-policy {client_auth_policy!r} (require, require-verify)")
    version = MIN_VERSIONS.get(min_version.lower())
    if version is None:
        raise TLSConfigError(f"invalid --tls-min-version {min_version!r} (ssl3.0, tls1.0, tls1.1, tls1.2, tls1.3)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0/1.1 when asked for, as Go
            ctx.minimum_version = version
    except (ValueError, ssl.SSLError):
        pass
    if version <= ssl.TLSVersion.TLSv1_1:
        # let old clients in when asked to (OpenSSL's security level 2 refuses them)
        try:
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        except ssl.SSLError:
            pass
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"failed to build TLS config - {exc}") from None
    if client_auth_policy:
        ctx.verify_mode = ssl.CERT_REQUIRED
    if root_ca_file:
        try:
            ctx.load_verify_locations(cafile=root_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(f"failed to build TLS config - {exc}") from None
    elif client_auth_policy:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx
