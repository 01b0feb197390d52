"""``nsq admin --serve`` guard (the nsq/tui/serve/ package): loopback by default,
credentials beyond loopback, who may act, per-session env, real sessions.

Sessions spawn a stub command that speaks textual-serve's wire (the
``__GANGLION__`` prelude, then ``D``/``M`` packets) and reports its argv
and environment, plus one real Textual app."""

from __future__ import annotations

import base64
import json
import sys

import aiohttp
import click
import pytest
from click.testing import CliRunner

from nsq.tui.serve import (Access, CommandServer, ServeError, Session, Visitor, admin_session, is_loopback,
                           parse_http_address, serve_admin)

STUB = r"""
import json, os, sys
out = sys.stdout.buffer
out.write(b"__GANGLION__\n")
keys = ["NSQ_ADMIN_USER", "NSQ_ADMIN_READ_ONLY", "NSQ_ADMIN_REMOTE_IP", "NSQ_ADMIN_USER_AGENT", "NSQ_ADMIN_URL",
        "TEXTUAL_DRIVER", "COLUMNS", "ROWS"]
payload = json.dumps({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keys}}).encode()
out.write(b"D" + len(payload).to_bytes(4, "big") + payload)
out.flush()
stdin = sys.stdin.buffer
while True:
    head = stdin.read(5)
    if len(head) < 5:
        break
    body = stdin.read(int.from_bytes(head[1:], "big"))
    if head[:1] == b"M" and json.loads(body).get("type") == "quit":
        break
"""
ADMIN_ARGV = [sys.executable, "-c", STUB, "admin", "--lookupd-http-address", "127.0.0.1:4161"]


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def admin_factory(read_only: bool = False, admin_users: tuple[str, ...] = ()):
    def factory(visitor: Visitor) -> Session:
        return admin_session(ADMIN_ARGV, visitor, read_only=read_only, admin_users=list(admin_users), environ={})
    return factory


async def started(server: CommandServer) -> CommandServer:
    await server.start()
    return server


async def session_report(url: str, **kwargs) -> dict:
    """Open the websocket and return what the stub reported."""
    async with aiohttp.ClientSession() as s, s.ws_connect(url + "ws?width=100&height=30", **kwargs) as ws:
        msg = await ws.receive(timeout=20)
        assert msg.type == aiohttp.WSMsgType.BINARY, msg
        return json.loads(msg.data)


# -- pure parts ----------------------------------------------------------------------


def test_addresses_and_loopback():
    assert parse_http_address("127.0.0.1:4171") == ("127.0.0.1", 4171)
    assert parse_http_address("[::1]:0") == ("::1", 0)
    assert parse_http_address(":4171") == ("", 4171)
    for bad in ("4171", "host:port", "h:70000"):
        with pytest.raises(ServeError):
            parse_http_address(bad)
    assert is_loopback("127.0.0.1") and is_loopback("127.3.2.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("")
    assert not is_loopback("10.1.2.3")


def test_admin_session_argv_and_env():
    v = Visitor("alice", "10.0.0.9", "Firefox", "http://box:4171")
    s = admin_session(["nsq", "admin"], v, read_only=False, admin_users=[], environ={})
    assert s.argv == ["nsq", "admin"] and not s.read_only
    assert s.env == {"NSQ_ADMIN_USER": "alice", "NSQ_ADMIN_REMOTE_IP": "10.0.0.9", "NSQ_ADMIN_USER_AGENT": "Firefox",
                     "NSQ_ADMIN_URL": "http://box:4171", "NSQ_ADMIN_READ_ONLY": None}
    # --read-only: flag and env, once
    s = admin_session(["nsq", "admin", "--read-only"], v, read_only=True, admin_users=[], environ={})
    assert s.argv == ["nsq", "admin", "--read-only"] and s.env["NSQ_ADMIN_READ_ONLY"] == "1" and s.read_only
    s = admin_session(["nsq", "admin", "--read-only=true"], v, read_only=True, admin_users=[], environ={})
    assert s.argv == ["nsq", "admin", "--read-only=true"]
    s = admin_session(["nsq", "admin", "--read-only=false"], v, read_only=True, admin_users=[], environ={})
    assert s.argv == ["nsq", "admin", "--read-only=false", "--read-only"]
    # admin users: listed acts, others and the unknown read only
    assert not admin_session(["a"], v, read_only=False, admin_users=["alice"], environ={}).read_only
    bob = admin_session(["a"], Visitor("bob"), read_only=False, admin_users=["alice"], environ={})
    assert bob.read_only and bob.argv == ["a", "--read-only"] and bob.env["NSQ_ADMIN_USER"] == "bob"
    nobody = admin_session(["a"], Visitor(None), read_only=False, admin_users=["anonymous"], environ={})
    assert nobody.read_only and nobody.env["NSQ_ADMIN_USER"] == "anonymous"
    # a server started with NSQ_ADMIN_READ_ONLY=1 never hands out actions
    assert admin_session(["a"], v, read_only=False, admin_users=[], environ={"NSQ_ADMIN_READ_ONLY": "1"}).read_only


def test_refuses_beyond_loopback_with_actions_and_no_credentials():
    for addr in ("0.0.0.0:4171", ":4171", "[::]:4171"):
        with pytest.raises(ServeError, match="refusing to serve on .*credentials .*--read-only"):
            serve_admin(ADMIN_ARGV, addr, read_only=False, admin_users=[], acl_http_header="X-Forwarded-User",
                        basic_auth=None, token=None)
    with pytest.raises(ServeError, match="empty"):
        Access(token="")
    with pytest.raises(ServeError, match="non-empty"):
        Access(basic_auth=("admin", ""))
    # inside a click command: one "Error:" line, exit 1, no traceback

    @click.command()
    def cmd() -> None:
        serve_admin(ADMIN_ARGV, "0.0.0.0:4171", read_only=False, admin_users=["alice"],
                    acl_http_header="X-Forwarded-User", basic_auth=None, token=None)

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == 1 and r.output.startswith("Error: refusing to serve on 0.0.0.0:4171"), r.output


# -- over HTTP -----------------------------------------------------------------------


async def test_loopback_without_credentials_serves_the_page_to_localhost_only():
    server = await started(CommandServer(admin_factory(), "127.0.0.1:0"))
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url) as r:
                page = await r.text()
                assert r.status == 200 and f'data-session-websocket-url="ws://127.0.0.1:{server.port}/ws"' in page
            async with s.get(server.url, headers={"Host": f"attacker.example:{server.port}"}) as r:
                assert r.status == 403  # DNS rebinding
        report = await session_report(server.url)
        assert report["argv"] == ADMIN_ARGV[3:]
        assert report["env"]["NSQ_ADMIN_USER"] == "anonymous" and report["env"]["NSQ_ADMIN_READ_ONLY"] is None
        assert report["env"]["TEXTUAL_DRIVER"] == "textual.drivers.web_driver:WebDriver"
        assert (report["env"]["COLUMNS"], report["env"]["ROWS"]) == ("100", "30")
    finally:
        await server.close()


async def test_beyond_loopback_read_only_needs_no_credentials_and_offers_no_action():
    server = await started(CommandServer(admin_factory(read_only=True), "0.0.0.0:0", actions=False))
    try:
        async with aiohttp.ClientSession() as s, s.get(server.url) as r:
            assert r.status == 200
        report = await session_report(server.url, headers={"X-Forwarded-User": "alice"})
        assert report["argv"][-1] == "--read-only" and report["env"]["NSQ_ADMIN_READ_ONLY"] == "1"
        assert report["env"]["NSQ_ADMIN_USER"] == "alice"
    finally:
        await server.close()


async def test_beyond_loopback_basic_auth_is_checked_before_the_app_starts():
    access = Access(basic_auth=("alice", "s3cret"), user_header="X-Forwarded-User")
    server = await started(CommandServer(admin_factory(admin_users=("alice",)), "0.0.0.0:0", access=access))
    try:
        async with aiohttp.ClientSession() as s:
            for path in ("", "ws", "static/js/textual.js"):
                async with s.get(server.url + path) as r:
                    assert r.status == 401, path
                    assert r.headers["WWW-Authenticate"].startswith("Basic ")
            async with s.get(server.url, headers=basic("alice", "wrong")) as r:
                assert r.status == 401
            async with s.get(server.url, headers=basic("mallory", "s3cret")) as r:
                assert r.status == 401
            async with s.get(server.url, headers=basic("alice", "s3cret")) as r:
                assert r.status == 200 and "textual-terminal" in await r.text()
            async with s.get(server.url + "static/js/textual.js", headers=basic("alice", "s3cret")) as r:
                assert r.status == 200
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await session_report(server.url)
        assert exc.value.status == 401
        # alice is an admin user: actions; her name comes from basic auth, not a forged header
        report = await session_report(server.url, headers={**basic("alice", "s3cret"), "X-Forwarded-User": "root"})
        assert report["env"]["NSQ_ADMIN_USER"] == "alice" and report["env"]["NSQ_ADMIN_READ_ONLY"] is None
        assert "--read-only" not in report["argv"]
        # a websocket from another site's page is refused even with credentials
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await session_report(server.url, headers={**basic("alice", "s3cret"), "Origin": "http://evil.example"})
        assert exc.value.status == 403
        report = await session_report(server.url, headers={**basic("alice", "s3cret"),
                                                           "Origin": f"http://127.0.0.1:{server.port}"})
        assert report["env"]["NSQ_ADMIN_USER"] == "alice"
    finally:
        await server.close()


async def test_token_sets_a_session_cookie_and_the_header_names_the_user():
    access = Access(token="t0ken-t0ken", user_header="X-Auth-User")
    server = await started(CommandServer(admin_factory(admin_users=("alice",)), "0.0.0.0:0", access=access))
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:  # unsafe: IP hosts
            async with s.get(server.url + "?token=nope") as r:
                assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer ")
            async with s.get(server.url + "?token=t0ken-t0ken&fontsize=14", allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/?fontsize=14"
                cookie = r.cookies["nsq_serve_session"]
                assert cookie["httponly"] and cookie["samesite"] == "Strict"
            async with s.get(server.url + "?fontsize=14") as r:  # the cookie now
                assert r.status == 200
            async with aiohttp.ClientSession() as other:  # a forged cookie is not one
                async with other.get(server.url, cookies={"nsq_serve_session": "abc.def"}) as r:
                    assert r.status == 401
            async with s.ws_connect(server.url + "ws", headers={"X-Auth-User": "bob"}) as ws:
                report = json.loads((await ws.receive(timeout=20)).data)
        # bob is not an admin user: read-only session, named bob
        assert report["env"]["NSQ_ADMIN_USER"] == "bob" and report["env"]["NSQ_ADMIN_READ_ONLY"] == "1"
        assert report["argv"][-1] == "--read-only"
        report = await session_report(server.url, headers={"Authorization": "Bearer t0ken-t0ken",
                                                           "X-Auth-User": "alice", "User-Agent": "pytest"})
        assert report["env"]["NSQ_ADMIN_USER"] == "alice" and report["env"]["NSQ_ADMIN_READ_ONLY"] is None
        assert report["env"]["NSQ_ADMIN_USER_AGENT"] == "pytest"
        assert report["env"]["NSQ_ADMIN_REMOTE_IP"] == "127.0.0.1"
        assert report["env"]["NSQ_ADMIN_URL"] == f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


async def test_a_real_textual_app_session():
    """The page's websocket drives a real Textual app through the web driver
    (it draws, and quits when the browser goes)."""
    app = ("from textual.app import App\nfrom textual.widgets import Static\n"
           "class Hello(App):\n    def compose(self):\n        yield Static('hello from nsq')\nHello().run()\n")
    argv = [sys.executable, "-c", app]
    server = await started(CommandServer(lambda v: Session(argv, {}, v.user), "127.0.0.1:0", actions=False))
    try:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.url + "ws?width=60&height=10") as ws:
            await ws.send_json(["resize", {"width": 60, "height": 10}])
            screen = b""
            while b"hello from nsq" not in screen:
                msg = await ws.receive(timeout=30)
                assert msg.type == aiohttp.WSMsgType.BINARY, msg
                screen += msg.data
        for _ in range(100):  # the process is gone once the browser went
            if not server._services:
                break
            import asyncio
            await asyncio.sleep(0.1)
        assert not server._services
    finally:
        await server.close()


async def test_a_finished_session_is_reaped_by_asyncio_alone(caplog):
    """The app process exits after its session: it must not be killed (and so
    polled and reaped) behind asyncio's child watcher, which would log
    "Unknown child process pid N, will report returncode 255"."""
    import asyncio

    server = await started(CommandServer(admin_factory(), "127.0.0.1:0"))
    try:
        await session_report(server.url)
        for _ in range(100):
            if not server._services:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the watcher's thread reports the exit
    finally:
        await server.close()
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]


async def test_page_loads_nothing_from_another_host():
    """Works offline: the page, its stylesheets and the fonts they name all
    come from this server (textual-serve's page linked fonts.googleapis.com)."""
    import re
    from urllib.parse import urljoin, urlsplit

    server = await started(CommandServer(admin_factory(), "127.0.0.1:0"))
    own = f"127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url) as r:
                page = await r.text()
            # every absolute URL in the page (attributes, inline CSS, inline scripts) is this server's
            for url in re.findall(r"""(?:https?|wss?):(//[^\s"'()<>]+)|["'(](//[^\s"'()<>]+)""", page):
                netloc = urlsplit(url[0] or url[1]).netloc
                assert netloc == own, (url, page)
            refs = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']+)""", page)
            refs += re.findall(r"""url\(\s*["']?([^"')]+)""", page)
            assert any(ref.endswith(".ttf") for ref in refs), "the terminal font is served locally"
            for ref in refs:
                url = urljoin(server.url, ref)
                assert urlsplit(url).netloc == own, ref
                async with s.get(url) as r:
                    assert r.status == 200, url
                    body = await r.read()
                if url.endswith(".css"):
                    css = re.sub(rb"/\*.*?\*/", b"", body, flags=re.S)  # licence comments name sites
                    assert b"@import" not in css
                    for inner in re.findall(rb"""url\(\s*["']?([^"')]+)""", css):
                        assert urlsplit(urljoin(url, inner.decode())).netloc == own, inner
                if url.endswith(".js"):
                    assert not re.search(rb"https?://", body), url
    finally:
        await server.close()
