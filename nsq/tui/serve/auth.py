"""Checking a request's credentials before anything is spawned: HTTP basic
auth, a bearer token (header, or ``?token=`` on the page URL once), and the
HttpOnly, SameSite=Strict session cookie issued after either. Secrets are
compared in constant time (:func:`hmac.compare_digest`); the cookie is
``<session id>.<HMAC-SHA256 of it>`` under a per-process key."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from nsq.tui.serve.sessions import Access

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["COOKIE", "Authenticator"]

#: the session cookie's name
COOKIE = "nsq_serve_session"
_MAX_SESSIONS = 10_000  # remembered browser sessions (oldest forgotten first)


class Authenticator:
    """The credentials of one server.

    Args:
        access: what is configured (basic auth, token).
        realm: named in the ``WWW-Authenticate`` challenge.
    """

    def __init__(self, access: Access, realm: str) -> None:
        self.access = access
        self.realm = realm
        self._secret = secrets.token_bytes(32)
        self._browser_sessions: OrderedDict[str, str | None] = OrderedDict()

    def check_basic(self, header: str) -> str | None:
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

    def check_token(self, given: str | None) -> bool:
        """Whether ``given`` is this server's token."""
        if self.access.token is None or not given:
            return False
        return hmac.compare_digest(given.encode(), self.access.token.encode())

    def _cookie_value(self, sid: str) -> str:
        mac = hmac.new(self._secret, sid.encode(), hashlib.sha256).hexdigest()
        return f"{sid}.{mac}"

    def check_cookie(self, value: str | None) -> tuple[bool, str | None]:
        """(valid session cookie?, the user it was issued to)."""
        sid, _, mac = (value or "").partition(".")
        if not sid or not mac:
            return False, None
        want = hmac.new(self._secret, sid.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac.encode(), want.encode()) or sid not in self._browser_sessions:
            return False, None
        return True, self._browser_sessions[sid]

    def new_browser_session(self, user: str | None) -> str:
        """A new session cookie value for ``user`` (the oldest sessions are
        forgotten past 10,000)."""
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
        user = self.check_basic(authorization)
        if user is not None:
            ok, _ = self.check_cookie(request.cookies.get(COOKIE))
            return True, user, not ok
        if authorization[:7].lower() == "bearer " and self.check_token(authorization[7:].strip()):
            return True, None, False
        if self.check_token(request.query.get("token")):
            return True, None, True
        ok, cookie_user = self.check_cookie(request.cookies.get(COOKIE))
        return (True, cookie_user, False) if ok else (False, None, False)

    def unauthorized(self) -> web.Response:
        """The 401 answer, with the challenge for what is configured."""
        from aiohttp import web

        if self.access.basic_auth is not None:
            challenge = f'Basic realm="{self.realm}", charset="UTF-8"'
            text = "401 Unauthorized: log in with the server's HTTP basic auth user and password\n"
        else:
            challenge = f'Bearer realm="{self.realm}"'
            text = "401 Unauthorized: open the page with ?token=TOKEN (or send Authorization: Bearer TOKEN)\n"
        return web.Response(status=401, text=text, headers={"WWW-Authenticate": challenge})
