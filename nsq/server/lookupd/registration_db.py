"""nsqlookupd's registration DB (Go: nsqlookupd/registration_db.go).

A registration is ``(category, key, subkey)``:

- ``("client", "", "")``: every identified nsqd (``/nodes``);
- ``("topic", topic, "")``: the producers of a topic (``/lookup``, ``/topics``);
- ``("channel", topic, channel)``: the producers that have that channel.

Each maps producer id (the nsqd connection's ``ip:port``) to a
:class:`Producer`. A registration may exist with no producer (created over
HTTP, or left after its last producer went), as in Go. ``"*"`` as key or
subkey matches any.
"""

from __future__ import annotations

import time
from collections.abc import ItemsView
from dataclasses import dataclass

from nsq.protocol.lookupd import PeerInfo

__all__ = ["Peer", "Producer", "Registration", "RegistrationDB"]

Registration = tuple[str, str, str]


@dataclass(eq=False)
class Peer:
    """One connected nsqd, shared by all of its registrations.

    Attributes:
        id: the nsqd connection's ``ip:port``.
        info: what it said in IDENTIFY (plus ``remote_address``).
        last_update: monotonic seconds of its IDENTIFY or last PING.
    """

    id: str
    info: PeerInfo
    last_update: float = 0.0


@dataclass(eq=False)
class Producer:
    """One nsqd in one registration.

    Attributes:
        peer: the nsqd.
        tombstoned_at: monotonic seconds of ``/topic/tombstone``, or None.
    """

    peer: Peer
    tombstoned_at: float | None = None

    @property
    def id(self) -> str:
        return self.peer.id

    @property
    def info(self) -> PeerInfo:
        return self.peer.info

    def tombstone(self, now: float | None = None) -> None:
        """Hide this producer of this topic for the tombstone lifetime."""
        self.tombstoned_at = time.monotonic() if now is None else now

    def is_tombstoned(self, lifetime: float, now: float | None = None) -> bool:
        """True while a tombstone set less than ``lifetime`` seconds ago lasts."""
        if self.tombstoned_at is None:
            return False
        now = time.monotonic() if now is None else now
        return now - self.tombstoned_at < lifetime

    def is_active(self, inactive_timeout: float, tombstone_lifetime: float, now: float) -> bool:
        """Go's FilterByActive: pinged within the timeout and not tombstoned."""
        return now - self.peer.last_update <= inactive_timeout and not self.is_tombstoned(tombstone_lifetime, now)


def _matches(reg: Registration, category: str, key: str, subkey: str) -> bool:
    return reg[0] == category and (key == "*" or reg[1] == key) and (subkey == "*" or reg[2] == subkey)


class RegistrationDB:
    """Registrations and their producers; insertion-ordered."""

    def __init__(self) -> None:
        self._map: dict[Registration, dict[str, Producer]] = {}

    def add_registration(self, reg: Registration) -> None:
        """Make ``reg`` known (``/topic/create``, ``/channel/create``)."""
        self._map.setdefault(reg, {})

    def add_producer(self, reg: Registration, producer: Producer) -> bool:
        """Add ``producer`` to ``reg`` (created if new); False if it was there."""
        producers = self._map.setdefault(reg, {})
        if producer.id in producers:
            return False
        producers[producer.id] = producer
        return True

    def remove_producer(self, reg: Registration, producer_id: str) -> tuple[bool, int]:
        """Remove a producer; returns (was it there, producers left)."""
        producers = self._map.get(reg)
        if producers is None:
            return False, 0
        removed = producers.pop(producer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, reg: Registration) -> None:
        """Forget ``reg`` and all its producers."""
        self._map.pop(reg, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """Registrations matching (``"*"`` matches any key / subkey)."""
        if key != "*" and subkey != "*":
            reg = (category, key, subkey)
            return [reg] if reg in self._map else []
        return [reg for reg in self._map if _matches(reg, category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching registrations, each nsqd once."""
        if key != "*" and subkey != "*":
            return list(self._map.get((category, key, subkey), {}).values())
        seen: dict[str, Producer] = {}
        for reg, producers in self._map.items():
            if _matches(reg, category, key, subkey):
                for pid, producer in producers.items():
                    seen.setdefault(pid, producer)
        return list(seen.values())

    def lookup_registrations(self, producer_id: str) -> list[Registration]:
        """Every registration ``producer_id`` is in."""
        return [reg for reg, producers in self._map.items() if producer_id in producers]

    def items(self) -> ItemsView[Registration, dict[str, Producer]]:
        """``(registration, {producer id: Producer})`` pairs (for ``/debug``)."""
        return self._map.items()


def keys(regs: list[Registration]) -> list[str]:
    """The keys (topic names) of ``regs``, de-duplicated, in order."""
    return list(dict.fromkeys(r[1] for r in regs))


def subkeys(regs: list[Registration]) -> list[str]:
    """The subkeys (channel names) of ``regs``, de-duplicated, in order."""
    return list(dict.fromkeys(r[2] for r in regs))


__all__ += ["keys", "subkeys"]
