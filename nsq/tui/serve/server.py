"""The aiohttp server of ``nsq admin --serve``: the page, the websocket of
each browser session (its own process: :mod:`nsq.tui.serve.spawn`) and the
guard in front of both -- credentials (:mod:`nsq.tui.serve.auth`), same
origin for the websocket, a loopback ``Host`` for an open loopback server.

Built on textual-serve's ``Server``, which lends its templates, static
files, download handler and browser-message loop (``_process_messages``, a
private member: see :mod:`nsq.tui.serve.spawn`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from nsq._internal.neterrors import ListenError, listen_errors
from nsq.tui.serve.addresses import (
    DEFAULT_HTTP_ADDRESS,
    ServeError,
    is_loopback,
    loopback_host_header,
    parse_http_address,
)
from nsq.tui.serve.auth import COOKIE, Authenticator
from nsq.tui.serve.page import local_page
from nsq.tui.serve.sessions import Access, Session, Visitor
from nsq.tui.serve.spawn import session_service_class

__all__ = ["CommandServer"]

log = logging.getLogger("nsq.serve")


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
        self.auth = Authenticator(self.access, title)
        self._services: set[Any] = set()
        self._runner: Any = None
        # textual-serve's Server lends its template and static paths, the
        # download handler and the browser-message loop; the page and the
        # websocket (per-session argv and environment) are ours
        from textual_serve.server import Server

        self._ts = Server(command=title, host=self.host or "0.0.0.0", port=self.port, title=title)

    # credentials ----------------------------------------------------------------

    def authenticate(self, request: Any) -> tuple[bool, str | None, bool]:
        """Check a request's credentials (:meth:`Authenticator.authenticate`).

        Returns:
            (accepted, basic-auth user or None, whether a session cookie
            should be issued).
        """
        return self.auth.authenticate(request)

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
        from aiohttp.typedefs import Handler
        from multidict import MultiDict

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not self.access.required and self.loopback and not loopback_host_header(request.host):
                return web.Response(status=403, text="403 Forbidden: open this server as localhost or 127.0.0.1\n")
            accepted, basic_user, issue_cookie = self.authenticate(request)
            if not accepted:
                return self.auth.unauthorized()
            if issue_cookie and request.path == "/" and request.method == "GET":
                query = MultiDict(request.query)
                query.pop("token", None)
                location = request.rel_url.with_query(query) if query else request.rel_url.with_query(None)
                response: web.StreamResponse
                if "token" in request.query:
                    response = web.Response(status=303, headers={"Location": str(location)})
                else:
                    response = await handler(request)
                response.set_cookie(COOKIE, self.auth.new_browser_session(basic_user), httponly=True,
                                    samesite="Strict", path="/", secure=self.base_url(request).startswith("https"))
                return response
            return await handler(request)

        app = web.Application(middlewares=[guard])
        with open(os.path.join(self._ts.templates_path, "app_index.html"), encoding="utf-8") as fh:
            page = local_page(fh.read())  # no font (nor anything) from another host
        aiohttp_jinja2.setup(app, loader=jinja2.DictLoader({"app_index.html": page}))
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
            service = session_service_class()(
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
            # after the quit message the app usually exits by itself: wait for
            # that first. kill() on a process that has exited but is not yet
            # reaped polls it (Popen.send_signal, bpo-38630) and reaps it
            # under asyncio's child watcher, which then logs "Unknown child
            # process pid N, will report returncode 255"
            try:
                await asyncio.wait_for(process.wait(), 5)
            except asyncio.TimeoutError:
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
            with listen_errors("HTTP", self.http_address):
                await site.start()
        except ListenError as exc:
            await self._runner.cleanup()
            raise ServeError(str(exc)) from None
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
