"""Running a server until SIGINT/SIGTERM: :func:`serve` for any command,
:func:`serve_admin` for ``nsq admin --serve`` (nsqadmin's
``--http-address``, ``--admin-user``, ``--acl-http-header``)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence

from nsq.tui.serve.addresses import DEFAULT_HTTP_ADDRESS
from nsq.tui.serve.server import CommandServer
from nsq.tui.serve.sessions import Access, Session, Visitor, admin_session, truthy

__all__ = ["serve", "serve_admin"]

log = logging.getLogger("nsq.serve")


def _setup_logging() -> None:
    if not logging.getLogger("nsq").handlers:
        from nsq._internal.logs import setup_logging

        setup_logging("[serve] ", "info")


async def _run(server: CommandServer, describe: str) -> None:
    import signal

    await server.start()
    log.info("serving %s on %s, open %s (%s)", server.title, server.http_address, server.url, describe)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await stop.wait()
    finally:
        await server.close()


def serve(command: Sequence[str] | Callable[[Visitor], Session], http_address: str = DEFAULT_HTTP_ADDRESS, *,
          actions: bool = True, basic_auth: tuple[str, str] | None = None, token: str | None = None,
          user_header: str | None = "X-Forwarded-User", title: str | None = None,
          public_url: str | None = None) -> None:
    """Serve ``command`` to browsers until SIGINT/SIGTERM (blocks).

    Args:
        command: the argv to run per browser session, or a function making
            each session's :class:`Session` from its :class:`Visitor`.
        http_address: ``HOST:PORT`` (default loopback :data:`DEFAULT_HTTP_ADDRESS`).
        actions: the command can change things (see :class:`CommandServer`).
        basic_auth, token, user_header: see :class:`Access`.
        title: page title (default: the command's program name).
        public_url: see :class:`CommandServer`.

    Raises:
        ServeError: unsafe exposure, bad address, empty secret, address in use.
    """
    if callable(command):
        factory = command
        name = title or "nsq"
    else:
        argv = list(command)

        def factory(visitor: Visitor) -> Session:
            return Session(argv, {}, visitor.user, not actions)

        name = title or os.path.basename(argv[0])
    access = Access(basic_auth, token, user_header)
    server = CommandServer(factory, http_address, actions=actions, access=access, title=name,
                           public_url=public_url)
    _setup_logging()
    creds = " and ".join(x for x, on in (("HTTP basic auth", basic_auth), ("token", token)) if on) or "no credentials"
    asyncio.run(_run(server, f"{creds}, {'actions' if actions else 'read-only'}"))


def serve_admin(argv: list[str], http_address: str, *, read_only: bool, admin_users: list[str],
                acl_http_header: str, basic_auth: tuple[str, str] | None, token: str | None) -> None:
    """Serve ``nsq admin`` to browsers (``nsq admin --serve``); blocks until
    SIGINT/SIGTERM.

    Args:
        argv: the ``nsq admin ...`` command line of one session, without the
            serve flags (``[sys.executable, "-m", "nsq", "admin", ...]``).
        http_address: ``HOST:PORT`` to bind (nsqadmin's ``--http-address``).
        read_only: every session read-only (no actions offered).
        admin_users: users allowed to act (``--admin-user``); empty: everyone.
        acl_http_header: header naming the user (``--acl-http-header``),
            used when basic auth does not name one.
        basic_auth: (user, password) for HTTP basic auth, or None.
        token: a bearer token, or None.

    Each session runs ``argv`` with ``NSQ_ADMIN_USER`` and, when read-only,
    ``--read-only`` and ``NSQ_ADMIN_READ_ONLY=1`` (:func:`admin_session`).

    Raises:
        ServeError: bound beyond loopback with actions enabled and no
            credentials; a bad address; an empty secret; address in use.
    """
    users = list(admin_users)

    def factory(visitor: Visitor) -> Session:
        return admin_session(argv, visitor, read_only=read_only, admin_users=users)

    actions = not (read_only or truthy(os.environ.get("NSQ_ADMIN_READ_ONLY")))
    server = CommandServer(factory, http_address, actions=actions,
                           access=Access(basic_auth, token, acl_http_header or None), title="nsq admin")
    _setup_logging()
    creds = " and ".join(x for x, on in (("HTTP basic auth", basic_auth), ("token", token)) if on) or "no credentials"
    who = ("read-only" if not actions else
           (f"actions for {', '.join(users)}" if users else "actions for every user"))
    asyncio.run(_run(server, f"{creds}, {who}"))
