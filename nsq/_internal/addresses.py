"""``host:port`` helpers shared by the daemons."""

from __future__ import annotations

__all__ = ["AddressError", "split_host_port", "fmt_addr"]


class AddressError(ValueError):
    """A malformed ``host:port``.

    Attributes:
        reason: what is wrong, in a few words without the address
            (``missing port``, ``port 70000 out of range (0-65535)``).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def split_host_port(address: str, default_port: int | None = None) -> tuple[str, int]:
    """Split ``host:port`` / ``[v6]:port`` / ``:port`` (host ``""``).

    Args:
        address: the text.
        default_port: the port of an address without one (``host`` alone);
            None: an address without a port is an error.

    Raises:
        AddressError: (a ValueError) no port (and no default), or a port
            that is not a number in 0..65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep or (address.startswith("[") and address.endswith("]")):
        if default_port is None:
            raise AddressError(f"address {address!r} has no port", "missing port (host:port)")
        return address.strip("[]"), default_port
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        p = int(port)
    except ValueError:
        raise AddressError(f"address {address!r}: port {port!r} is not a number",
                           f"port {port!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise AddressError(f"port {p} out of range", f"port {p} out of range (0-65535)")
    return host, p


def fmt_addr(host: str, port: int | str) -> str:
    """``host:port``, bracketing an IPv6 host (one already in brackets is kept)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"
