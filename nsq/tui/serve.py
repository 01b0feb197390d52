"""Serve a Textual command to web browsers (``nsq admin --serve``), guarded.

Built on textual-serve: an aiohttp server whose page opens a websocket,
and each websocket session spawns the command with Textual's web driver
and relays its screen. On top of it this module adds what an operator's
tool needs before it is put on a network:

- **Loopback by default** (:data:`DEFAULT_HTTP_ADDRESS`). Bound beyond
  loopback, a command that can change things (``actions=True``) refuses to
  start unless credentials are configured (:class:`ServeError`).
- **Credentials** checked on every request -- the page, the static files
  and the websocket -- before any process is spawned: HTTP basic auth
  and/or a token (``Authorization: Bearer TOKEN``, or ``?token=TOKEN`` on
  the page URL, which answers with a redirect that sets an HttpOnly,
  SameSite=Strict session cookie so the token leaves the address bar).
  Secrets are compared in constant time (:func:`hmac.compare_digest`).
- **Who acts**: the basic-auth user, else the value of the trusted
  ``user_header`` (nsqadmin's ``--acl-http-header``, default
  ``X-Forwarded-User``, set by an authenticating proxy), else nobody
  (``anonymous``). :func:`admin_session` turns a visitor into the
  command line and environment of their session: read-only when the
  server is, or when ``admin_users`` is given and the user is not in it.
- **Browser checks**: the websocket must come from the page's own origin
  (``Origin`` equal to ``Host``/``X-Forwarded-Host``: no cross-site
  websocket driving the app); served open on loopback, the ``Host`` must
  be a loopback name (no DNS rebinding).

:func:`serve` serves any command; :func:`serve_admin` is ``nsq admin``'s.
:class:`CommandServer` is the aiohttp server itself (``await start()``,
``await close()``), for tests and embedding.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import shlex
import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import click

__all__ = ["DEFAULT_HTTP_ADDRESS", "Access", "CommandServer", "ServeError", "Session", "Visitor",
           "admin_session", "is_loopback", "parse_http_address", "serve", "serve_admin"]

log = logging.getLogger("nsq.serve")

#: nsqadmin's port, on loopback
DEFAULT_HTTP_ADDRESS = "127.0.0.1:4171"

_COOKIE = "nsq_serve_session"
_MAX_SESSIONS = 10_000  # remembered browser sessions (oldest forgotten first)


class ServeError(click.ClickException):
    """The server cannot (or must not) start: bad address, unsafe exposure,
    empty secret, port in use. Uncaught inside a click command it prints
    ``Error: <message>`` on stderr and exits 1."""


# -- addresses ---------------------------------------------------------------------


def parse_http_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port). ``[::1]:4171`` for IPv6; an empty host
    (``:4171``) means every interface and comes back as ``""``.

    Raises:
        ServeError: no port, or a port that is not 0..65535.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ServeError(f"invalid --http-address {address!r} (HOST:PORT, e.g. {DEFAULT_HTTP_ADDRESS})")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ServeError(f"invalid port in --http-address {address!r}")
    return host, port


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
    addrs = {info[4][0].split("%")[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


def _loopback_host_header(host_header: str) -> bool:
    host = urlsplit("//" + host_header).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- who is asking -----------------------------------------------------------------


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


def _truthy(value: str | None) -> bool:
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
    ro = read_only or _truthy(env_in.get("NSQ_ADMIN_READ_ONLY")) or not allowed
    args = list(argv)
    if ro and not any(a == "--read-only" or (a.startswith("--read-only=") and _truthy(a.partition("=")[2]))
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


# -- the server --------------------------------------------------------------------


def _app_service_class() -> type:
    from textual_serve.app_service import AppService

    class SessionService(AppService):  # type: ignore[misc]
        """textual-serve's AppService, spawning an argv (no shell) with a
        per-session environment."""

        def __init__(self, session: Session, **kwargs: Any) -> None:
            super().__init__(shlex.join(session.argv), **kwargs)
            self.session = session

        def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
            env = super()._build_environment(width=width, height=height)
            for key, value in self.session.env.items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = value
            return env

        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            self._process = process = await asyncio.create_subprocess_exec(
                *self.session.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height))
            self._stdin = process.stdin
            return process

    return SessionService


class CommandServer:
    """An aiohttp server giving each browser session its own process.

    Args:
        session: visitor -> :class:`Session` (the command to spawn), called
            once per websocket after the credentials passed.
        http_address: ``HOST:PORT`` to bind (port 0: any free port).
        actions: whether the command can change things; if so and no
            credentials are configured, binding beyond loopback is refused.
        access: credentials and the user header.
        title: the page title.
        public_url: ``scheme://host:port`` the browser uses, when a proxy
            changes it; by default taken from each request.

    Raises:
        ServeError: a bad address, or an unsafe exposure (see ``actions``).
    """

    def __init__(self, session: Callable[[Visitor], Session], http_address: str = DEFAULT_HTTP_ADDRESS, *,
                 actions: bool = True, access: Access | None = None, title: str = "nsq",
                 public_url: str | None = None) -> None:
        self.host, self.port = parse_http_address(http_address)
        self.http_address = http_address
        self.access = access or Access()
        self.loopback = is_loopback(self.host)
        if actions and not self.access.required and not self.loopback:
            raise ServeError(
                f"refusing to serve on {http_address}: beyond loopback with actions enabled, anyone who "
                "reaches the port could change the cluster. Configure credentials (HTTP basic auth or a "
                "token), or add --read-only, or bind to loopback (127.0.0.1:PORT)")
        self.session_factory = session
        self.title = title
        self.public_url = public_url.rstrip("/") if public_url else None
        self._secret = secrets.token_bytes(32)
        self._browser_sessions: OrderedDict[str, str | None] = OrderedDict()
        self._services: set[Any] = set()
        self._runner: Any = None
        # textual-serve's Server lends its template and static paths, the
        # download handler and the browser-message loop; the page and the
        # websocket (per-session argv and environment) are ours
        from textual_serve.server import Server

        self._ts = Server(command=title, host=self.host or "0.0.0.0", port=self.port, title=title)

    # credentials ----------------------------------------------------------------

    def _check_basic(self, header: str) -> str | None:
        """The user if ``header`` is valid basic auth for this server, else None."""
        if self.access.basic_auth is None or not header[:6].lower() == "basic ":
            return None
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        want_user, want_password = self.access.basic_auth
        ok_user = hmac.compare_digest(user.encode(), want_user.encode())
        ok_password = hmac.compare_digest(password.encode(), want_password.encode())
        return user if (sep and ok_user & ok_password) else None

    def _check_token(self, given: str | None) -> bool:
        if self.access.token is None or not given:
            return False
        return hmac.compare_digest(given.encode(), self.access.token.encode())

    def _cookie_value(self, sid: str) -> str:
        mac = hmac.new(self._secret, sid.encode(), hashlib.sha256).hexdigest()
        return f"{sid}.{mac}"

    def _check_cookie(self, value: str | None) -> tuple[bool, str | None]:
        sid, _, mac = (value or "").partition(".")
        if not sid or not mac:
            return False, None
        want = hmac.new(self._secret, sid.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac.encode(), want.encode()) or sid not in self._browser_sessions:
            return False, None
        return True, self._browser_sessions[sid]

    def _new_browser_session(self, user: str | None) -> str:
        sid = secrets.token_urlsafe(24)
        self._browser_sessions[sid] = user
        while len(self._browser_sessions) > _MAX_SESSIONS:
            self._browser_sessions.popitem(last=False)
        return self._cookie_value(sid)

    def authenticate(self, request: Any) -> tuple[bool, str | None, bool]:
        """Check a request's credentials.

        Returns:
            (accepted, basic-auth user or None, whether a session cookie
            should be issued). Without configured credentials every request
            is accepted.
        """
        if not self.access.required:
            return True, None, False
        authorization = request.headers.get("Authorization", "")
        user = self._check_basic(authorization)
        if user is not None:
            ok, _ = self._check_cookie(request.cookies.get(_COOKIE))
            return True, user, not ok
        if authorization[:7].lower() == "bearer " and self._check_token(authorization[7:].strip()):
            return True, None, False
        if self._check_token(request.query.get("token")):
            return True, None, True
        ok, cookie_user = self._check_cookie(request.cookies.get(_COOKIE))
        return (True, cookie_user, False) if ok else (False, None, False)

    def _unauthorized(self) -> Any:
        from aiohttp import web

        if self.access.basic_auth is not None:
            challenge = f'Basic realm="{self.title}", charset="UTF-8"'
            text = "401 Unauthorized: log in with the server's HTTP basic auth user and password\n"
        else:
            challenge = f'Bearer realm="{self.title}"'
            text = "401 Unauthorized: open the page with ?token=TOKEN (or send Authorization: Bearer TOKEN)\n"
        return web.Response(status=401, text=text, headers={"WWW-Authenticate": challenge})

    def visitor(self, request: Any, basic_user: str | None) -> Visitor:
        """Who is behind ``request`` (see :class:`Visitor`)."""
        user = basic_user
        if user is None and self.access.user_header:
            user = request.headers.get(self.access.user_header, "").strip() or None
        return Visitor(user, request.remote or "", request.headers.get("User-Agent", ""), self.base_url(request))

    def base_url(self, request: Any) -> str:
        """``scheme://host[:port]`` as the browser reached this server."""
        if self.public_url:
            return self.public_url
        scheme = request.headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip() or "http"
        host = request.headers.get("X-Forwarded-Host", request.host).split(",")[0].strip()
        return f"{scheme}://{host}"

    # aiohttp app ---------------------------------------------------------------

    def make_app(self) -> Any:
        """The aiohttp application (routes of textual-serve, guarded)."""
        import aiohttp_jinja2
        import jinja2
        from aiohttp import web

        @web.middleware
        async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
            if not self.access.required and self.loopback and not _loopback_host_header(request.host):
                return web.Response(status=403, text="403 Forbidden: open this server as localhost or 127.0.0.1\n")
            accepted, basic_user, issue_cookie = self.authenticate(request)
            if not accepted:
                return self._unauthorized()
            if issue_cookie and request.path == "/" and request.method == "GET":
                query = request.query.copy()
                query.pop("token", None)
                location = request.rel_url.with_query(query) if query else request.rel_url.with_query(None)
                response: web.StreamResponse
                if "token" in request.query:
                    response = web.Response(status=303, headers={"Location": str(location)})
                else:
                    response = await handler(request)
                response.set_cookie(_COOKIE, self._new_browser_session(basic_user), httponly=True,
                                    samesite="Strict", path="/", secure=self.base_url(request).startswith("https"))
                return response
            return await handler(request)

        app = web.Application(middlewares=[guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self._ts.templates_path))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/download/{key}", self._ts.handle_download, name="download"),
            web.static("/static", self._ts.statics_path, name="static"),
        ])
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def handle_index(self, request: Any) -> Any:
        """The page: xterm.js plus the websocket URL of this server."""
        import aiohttp_jinja2

        base = self.base_url(request)
        try:
            font_size = int(request.query.get("fontsize", "16"))
        except ValueError:
            font_size = 16
        ws_scheme = "wss" if base.startswith("https") else "ws"
        context = {
            "font_size": font_size,
            "app_websocket_url": f"{ws_scheme}://{base.split('://', 1)[1]}/ws",
            "config": {"static": {"url": f"{base}/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    def _same_origin(self, request: Any) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return True  # not a browser: credentials were enough
        origin_host = urlsplit(origin).netloc.lower()
        hosts = {request.host.lower()}
        if "X-Forwarded-Host" in request.headers:
            hosts.add(request.headers["X-Forwarded-Host"].split(",")[0].strip().lower())
        if self.public_url:
            hosts.add(urlsplit(self.public_url).netloc.lower())
        # a default port may be left out on either side
        hosts |= {h.removesuffix(":80").removesuffix(":443") for h in hosts}
        return origin_host in hosts or origin_host.removesuffix(":80").removesuffix(":443") in hosts

    async def handle_websocket(self, request: Any) -> Any:
        """One browser session: spawn the visitor's :class:`Session` and relay."""
        from aiohttp import web
        from textual_serve.server import to_int

        if not self._same_origin(request):
            log.warning("refused websocket from %s: Origin %s is not this server", request.remote,
                        request.headers.get("Origin"))
            return web.Response(status=403, text="403 Forbidden: cross-origin websocket\n")
        _, basic_user, _ = self.authenticate(request)  # passed the guard: only the user is wanted
        visitor = self.visitor(request, basic_user)
        session = self.session_factory(visitor)
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        service = None
        await websocket.prepare(request)
        log.info("session from %s user=%s %s: %s", visitor.remote_ip, session.user or "anonymous",
                 "read-only" if session.read_only else "actions allowed", shlex.join(session.argv))
        try:
            service = _app_service_class()(
                session, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                close=websocket.close, download_manager=self._ts.download_manager)
            self._services.add(service)
            await service.start(width, height)
            await self._ts._process_messages(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception:
            log.exception("session from %s failed", visitor.remote_ip)
        finally:
            if service is not None:
                await self._stop_service(service)
            log.info("session from %s user=%s ended", visitor.remote_ip, session.user or "anonymous")
        return websocket

    async def _stop_service(self, service: Any) -> None:
        self._services.discard(service)
        try:
            await asyncio.wait_for(service.stop(), 5)
        except (TimeoutError, Exception):
            pass
        process = service._process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()

    async def _on_shutdown(self, app: Any) -> None:
        await asyncio.gather(*(self._stop_service(s) for s in list(self._services)))

    # lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Bind and serve; sets :attr:`port` to the bound port.

        Raises:
            ServeError: the address cannot be bound.
        """
        from aiohttp import web

        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host or None, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise ServeError(f"cannot listen on {self.http_address}: {exc.strerror or exc}") from None
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        """``http://host:port/`` to open (loopback for an every-interface bind)."""
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}/"

    async def close(self) -> None:
        """Stop serving; end every session's process."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


# -- entry points ------------------------------------------------------------------


def _setup_logging() -> None:
    if not logging.getLogger("nsq").handlers:
        from nsq.server.logs import setup_logging

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

    actions = not (read_only or _truthy(os.environ.get("NSQ_ADMIN_READ_ONLY")))
    server = CommandServer(factory, http_address, actions=actions,
                           access=Access(basic_auth, token, acl_http_header or None), title="nsq admin")
    _setup_logging()
    creds = " and ".join(x for x, on in (("HTTP basic auth", basic_auth), ("token", token)) if on) or "no credentials"
    who = ("read-only" if not actions else
           (f"actions for {', '.join(users)}" if users else "actions for every user"))
    asyncio.run(_run(server, f"{creds}, {who}"))
