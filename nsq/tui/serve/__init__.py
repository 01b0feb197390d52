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

========================  ======================================================
module                    holds
========================  ======================================================
:mod:`.addresses`         ``HOST:PORT`` parsing, loopback checks, ServeError
:mod:`.sessions`          Access, Visitor, Session, :func:`admin_session`
:mod:`.auth`              basic auth, token, session cookie
:mod:`.spawn`             the per-session process (textual-serve's AppService,
                          whose private members it overrides: see there)
:mod:`.server`            :class:`CommandServer`, the guarded aiohttp app
:mod:`.run`               :func:`serve`, :func:`serve_admin`
========================  ======================================================
"""

from __future__ import annotations

from nsq.tui.serve.addresses import DEFAULT_HTTP_ADDRESS, ServeError, is_loopback, parse_http_address
from nsq.tui.serve.run import serve, serve_admin
from nsq.tui.serve.server import CommandServer
from nsq.tui.serve.sessions import Access, Session, Visitor, admin_session

__all__ = ["DEFAULT_HTTP_ADDRESS", "Access", "CommandServer", "ServeError", "Session", "Visitor",
           "admin_session", "is_loopback", "parse_http_address", "serve", "serve_admin"]
