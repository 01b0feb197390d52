"""``host:port`` helpers shared by the daemons."""

from __future__ import annotations

__all__ = ["split_host_port", "fmt_addr"]


def split_host_port(address: str) -> tuple[str, int]:
    """Split ``host:port`` / ``[v6]:port`` / ``:port``.

    Raises:
        ValueError: no port, or a port that is not a number in 0..65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address!r} has no port")
    host = host.strip("[]")
    p = int(port)
    if not 0 <= p <= 65535:
        raise ValueError(f"port {p} out of range")
    return host, p


def fmt_addr(host: str, port: int) -> str:
    """``host:port``, bracketing an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
