"""AUTH: asking an auth server what a client's secret allows (https://nsq.io/components/nsqd.html#auth;
Go: nsqd/auth.go, internal/auth/authorizations.go).

With ``--auth-http-address`` nsqd answers IDENTIFY with
``auth_required: true``; the client sends ``AUTH <secret>`` and nsqd asks
one of the auth servers (Go v1.2: starting at a random one, trying the
next on failure)::

    GET http://<auth>/auth?common_name=<CN>&remote_ip=<ip>&secret=<s>&tls=true|false

The answer (JSON, status 200) is::

    {"ttl": 3600, "identity": "user", "identity_url": "https://...",
     "authorizations": [{"permissions": ["subscribe", "publish"],
                         "topic": "regex", "channels": ["regex", ...]}]}

``ttl`` (s) must be > 0, permissions only ``subscribe``/``publish``, and
every topic/channel a valid regular expression, or the answer is refused.
The answer is cached until ``ttl`` lapses; a command after that asks
again. SUB needs ``subscribe`` and PUB/MPUB/DPUB ``publish`` on an
authorization whose topic regex matches the topic and one of whose channel
regexes matches the channel ("" for publishes). Regexes are searched (Go's
``regexp.MatchString``), not anchored.
"""

from __future__ import annotations

from nsq.protocol.errors import NSQError

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlencode

if TYPE_CHECKING:
    import aiohttp

__all__ = ["AuthError", "Authorization", "AuthState", "query_any_authd"]


class AuthError(NSQError):
    """No auth server gave a usable answer (the client sees ``E_AUTH_FAILED``)."""


@dataclass
class Authorization:
    """One grant: permissions on the topics and channels the regexes match."""

    topic: re.Pattern
    channels: list[re.Pattern]
    permissions: list[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        """Go's ``Authorization.IsAllowed``: ``channel`` "" means publish."""
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions:
            return False
        if not self.topic.search(topic):
            return False
        return any(c.search(channel) for c in self.channels)


@dataclass
class AuthState:
    """A cached auth answer.

    Attributes:
        identity, identity_url: shown in /stats (``auth_identity``...).
        expires: ``time.time()`` seconds when the answer lapses.
    """

    identity: str = ""
    identity_url: str = ""
    expires: float = 0.0
    authorizations: list[Authorization] = field(default_factory=list)

    def is_expired(self, now: float | None = None) -> bool:
        """True once ``now`` (``time.time()`` s) reaches :attr:`expires`."""
        return (time.time() if now is None else now) >= self.expires

    def is_allowed(self, topic: str, channel: str) -> bool:
        """True if some authorization allows it (``channel`` "" for publishes)."""
        return any(a.is_allowed(topic, channel) for a in self.authorizations)


def parse_auth_response(body: bytes, now: float | None = None) -> AuthState:
    """Check and decode an auth server's answer.

    Raises:
        AuthError: not JSON, ttl <= 0, an unknown permission or a bad regex.
    """
    try:
        data = json.loads(body)
    except ValueError:
        raise AuthError("invalid JSON from auth server") from None
    if not isinstance(data, dict):
        raise AuthError("invalid answer from auth server")
    auths: list[Authorization] = []
    for entry in data.get("authorizations") or []:
        if not isinstance(entry, dict):
            raise AuthError("invalid authorization")
        permissions = [str(p) for p in entry.get("permissions") or []]
        for p in permissions:
            if p not in ("subscribe", "publish"):
                raise AuthError(f"unknown permission {p}")
        try:
            topic = re.compile(str(entry.get("topic", "")))
        except re.error as exc:
            raise AuthError(f"unable to compile topic {entry.get('topic')!r} {exc}") from None
        channels = []
        for c in entry.get("channels") or []:
            try:
                channels.append(re.compile(str(c)))
            except re.error as exc:
                raise AuthError(f"unable to compile channel {c!r} {exc}") from None
        auths.append(Authorization(topic, channels, permissions))
    ttl = data.get("ttl")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(identity=str(data.get("identity") or ""), identity_url=str(data.get("identity_url") or ""),
                     expires=(time.time() if now is None else now) + ttl, authorizations=auths)


async def query_any_authd(session: aiohttp.ClientSession, addresses: list[str], remote_ip: str, tls: bool, common_name: str,
                          secret: str) -> AuthState:
    """Ask the auth servers, from a random one on, until one answers.

    Args:
        session: an ``aiohttp.ClientSession`` (its timeouts apply).
        addresses: ``host:port`` (or ``http(s)://host:port``) of auth servers.

    Raises:
        AuthError: every server failed (the last failure's text).
    """
    import aiohttp

    params = urlencode({"common_name": common_name, "remote_ip": remote_ip, "secret": secret,
                        "tls": "true" if tls else "false"})
    start = random.randrange(len(addresses))
    last = "no auth server"
    for i in range(len(addresses)):
        address = addresses[(start + i) % len(addresses)]
        base = address if "://" in address else f"http://{address}"
        try:
            async with session.get(f"{base.rstrip('/')}/auth?{params}") as resp:
                body = await resp.read()
                if resp.status != 200:
                    last = f"got response {resp.status} {body[:200]!r}"
                    continue
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            last = f"{address}: {exc or type(exc).__name__}"
            continue
        try:
            return parse_auth_response(body)
        except AuthError as exc:
            last = str(exc)
    raise AuthError(last)
