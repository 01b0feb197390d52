"""Where ``nsq admin --serve`` listens: ``HOST:PORT`` parsing, whether a
bind stays on loopback, and whether a ``Host`` header names loopback (no
DNS rebinding of an open loopback server)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import click

from nsq._internal.addresses import split_host_port

__all__ = ["DEFAULT_HTTP_ADDRESS", "ServeError", "is_loopback", "loopback_host_header", "parse_http_address"]

#: nsqadmin's port, on loopback
DEFAULT_HTTP_ADDRESS = "127.0.0.1:4171"


class ServeError(click.ClickException):
    """The server cannot (or must not) start: bad address, unsafe exposure,
    empty secret, port in use. Uncaught inside a click command it prints
    ``Error: <message>`` on stderr and exits 1."""


def parse_http_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port). ``[::1]:4171`` for IPv6; an empty host
    (``:4171``) means every interface and comes back as ``""``.

    Raises:
        ServeError: no port, or a port that is not 0..65535.
    """
    try:
        return split_host_port(address)
    except ValueError:
        if ":" not in address:
            raise ServeError(f"invalid --http-address {address!r} (HOST:PORT, e.g. {DEFAULT_HTTP_ADDRESS})") from None
        raise ServeError(f"invalid port in --http-address {address!r}") from None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only listens on loopback (127.0.0.0/8, ::1).
    ``""``, ``0.0.0.0`` and ``::`` are every interface (False); a name
    counts as loopback only if every address it resolves to is."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addrs = {str(info[4][0]).split("%")[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


def loopback_host_header(host_header: str) -> bool:
    """Whether a request's ``Host`` header names loopback (``localhost``,
    ``*.localhost``, 127.0.0.0/8, ::1)."""
    host = urlsplit("//" + host_header).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
