"""Who is asking and what their session runs: the server's credentials
rules (:class:`Access`), the visitor (:class:`Visitor`), the command and
environment spawned for them (:class:`Session`), and ``nsq admin``'s rule
for turning one into the other (:func:`admin_session`: nsqadmin's
``--admin-user`` and ``--acl-http-header``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nsq.tui.serve.addresses import ServeError

__all__ = ["Access", "Session", "Visitor", "admin_session", "truthy"]


@dataclass(frozen=True)
class Access:
    """Credentials and identity rules of a server.

    Attributes:
        basic_auth: (user, password) for HTTP basic auth, or None.
        token: a bearer token, or None.
        user_header: the request header naming the user when basic auth
            does not (nsqadmin's ``--acl-http-header``); None to ignore.

    Raises:
        ServeError: an empty user, password or token.
    """

    basic_auth: tuple[str, str] | None = None
    token: str | None = None
    user_header: str | None = "X-Forwarded-User"

    def __post_init__(self) -> None:
        if self.basic_auth is not None and (not self.basic_auth[0] or not self.basic_auth[1]):
            raise ServeError("HTTP basic auth needs a non-empty user and password")
        if self.basic_auth is not None and ":" in self.basic_auth[0]:
            raise ServeError("an HTTP basic auth user name cannot contain ':'")
        if self.token is not None and not self.token:
            raise ServeError("the token must not be empty")

    @property
    def required(self) -> bool:
        """Whether every request must carry credentials."""
        return self.basic_auth is not None or self.token is not None


@dataclass(frozen=True)
class Visitor:
    """The browser session being started.

    Attributes:
        user: the basic-auth user, else the ``user_header`` value, else None.
        remote_ip: the peer's address (as aiohttp sees it).
        user_agent: the browser's ``User-Agent``.
        base_url: ``scheme://host[:port]`` of the server as the browser sees it.
    """

    user: str | None
    remote_ip: str = ""
    user_agent: str = ""
    base_url: str = ""


@dataclass(frozen=True)
class Session:
    """What to spawn for one browser session.

    Attributes:
        argv: the command line (no shell).
        env: variables to set on top of the server's environment; a None
            value removes the variable.
        user: for the log line.
        read_only: for the log line.
    """

    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    user: str | None = None
    read_only: bool = False


def truthy(value: str | None) -> bool:
    """Go's true values for an environment variable or flag (``1``, ``true``, ``yes`` ...)."""
    return (value or "").strip().lower() in ("1", "true", "t", "yes", "on")


def admin_session(argv: Sequence[str], visitor: Visitor, *, read_only: bool, admin_users: Sequence[str],
                  environ: Mapping[str, str] | None = None) -> Session:
    """The ``nsq admin`` session of one visitor.

    Read-only when ``read_only``, when ``NSQ_ADMIN_READ_ONLY`` is already set
    in ``environ`` (default: this process's), or when ``admin_users`` is not
    empty and the visitor's user is unknown or not in it. A read-only
    session gets ``--read-only`` on its command line and
    ``NSQ_ADMIN_READ_ONLY=1``. Every session gets ``NSQ_ADMIN_USER`` (the
    user, or ``anonymous``), ``NSQ_ADMIN_REMOTE_IP``, ``NSQ_ADMIN_USER_AGENT``
    and ``NSQ_ADMIN_URL`` for the app's action log and notifications.
    """
    env_in = os.environ if environ is None else environ
    allowed = not admin_users or (visitor.user is not None and visitor.user in admin_users)
    ro = read_only or truthy(env_in.get("NSQ_ADMIN_READ_ONLY")) or not allowed
    args = list(argv)
    if ro and not any(a == "--read-only" or (a.startswith("--read-only=") and truthy(a.partition("=")[2]))
                      for a in args):
        args.append("--read-only")
    env: dict[str, str | None] = {
        "NSQ_ADMIN_USER": visitor.user or "anonymous",
        "NSQ_ADMIN_REMOTE_IP": visitor.remote_ip or None,
        "NSQ_ADMIN_USER_AGENT": visitor.user_agent or None,
        "NSQ_ADMIN_URL": visitor.base_url or None,
        "NSQ_ADMIN_READ_ONLY": "1" if ro else None,
    }
    return Session(args, env, visitor.user, ro)
