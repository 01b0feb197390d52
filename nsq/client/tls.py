"""Client TLS contexts for the ``tls_v1`` upgrade (go-nsq's ``tls_*`` options).

go-nsq checks nsqd's certificate against the system CAs (or
``tls_root_ca_file``) and the host name dialled, unless
``tls_insecure_skip_verify``; ``tls_cert``/``tls_key`` present a client
certificate (for ``--tls-client-auth-policy``); ``tls_min_version`` is
``ssl3.0``, ``tls1.0``, ``tls1.1``, ``tls1.2`` or ``tls1.3``.
"""

from __future__ import annotations

import ssl

from nsq.client.errors import ClientConfigError

__all__ = ["client_context"]

_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.MINIMUM_SUPPORTED,
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def client_context(root_ca_file: str = "", insecure_skip_verify: bool = False, cert: str = "", key: str = "",
                   min_version: str = "") -> ssl.SSLContext:
    """An SSLContext for connecting to nsqd.

    Raises:
        ClientConfigError: unreadable files, cert without key (or the
            reverse), an unknown minimum version.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if root_ca_file:
            ctx.load_verify_locations(cafile=root_ca_file)
        if bool(cert) != bool(key):
            raise ClientConfigError("tls_cert and tls_key must be given together")
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ClientConfigError(f"TLS: {exc}") from None
    if min_version:
        version = _VERSIONS.get(min_version.lower())
        if version is None:
            raise ClientConfigError(f"invalid tls_min_version {min_version!r}")
        ctx.minimum_version = version
    if insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
