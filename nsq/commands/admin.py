"""``nsq admin``: the cluster in a Textual TUI, in place of Go's nsqadmin.

Flags are nsqadmin's where they apply. The app itself (and Textual) is
imported only when the command runs, so ``nsq --help`` stays fast.

Environment: ``NSQ_ADMIN_USER`` names the acting user (default: the login
name), ``NSQ_ADMIN_READ_ONLY=1`` forces ``--read-only``; see
:mod:`nsq.cluster.actions` for the other fields of the notifications.
``NSQ_AUTH_SECRET`` is the default of ``--http-auth-secret`` (the secret
sent to nsqds started with ``--http-auth-required``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from nsq.commands._go import Decorator, GoCommand, GoDuration, fail, go_bool_option

__all__ = ["access", "admin"]

_TRUE = ("1", "true", "t", "yes", "y", "on")


def _bool_flag(name: str, help_text: str) -> Decorator:
    return go_bool_option(name, default="false", help=help_text)


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times)")
@click.option("--nsqd-http-address", "nsqd", multiple=True,
              help="nsqd HTTP address (may be given multiple times; without lookupd)")
@click.option("--http-client-connect-timeout", type=GoDuration(), default=2.0,
              help="timeout for HTTP connect (default 2s)")
@click.option("--http-client-request-timeout", type=GoDuration(), default=5.0,
              help="timeout for HTTP request (default 5s)")
@click.option("--http-client-tls-cert", default="", help="path to certificate file for the HTTP client")
@click.option("--http-client-tls-key", default="", help="path to key file for the HTTP client")
@click.option("--http-client-tls-root-ca-file", default="", help="path to CA file for the HTTP client")
@_bool_flag("--http-client-tls-insecure-skip-verify", "configure the HTTP client to skip verification of TLS "
            "certificates (default false)")
@click.option("--http-auth-secret", default="", envvar="NSQ_AUTH_SECRET", show_envvar=True, show_default=False,
              help="secret sent to the nsqds as 'Authorization: Bearer <secret>' (for nsqds started with "
                   "--http-auth-required); lookupds are asked without it")
@click.option("--notification-http-endpoint", default="",
              help="HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent")
@click.option("--admin-user", "admin_users", multiple=True,
              help="admin user (may be given multiple times); when set, only these users may act")
@click.option("--acl-http-header", default="X-Forwarded-User",
              help="HTTP header to check for the authenticated admin user with --serve "
                   "(default \"X-Forwarded-User\")")
@click.option("--refresh-interval", type=GoDuration(), default=2.0,
              help="time between polls of the cluster (default 2s; + and - change it in the app)")
@_bool_flag("--read-only", "offer no admin action (also NSQ_ADMIN_READ_ONLY=1) (default false)")
@click.option("--action-log", default="", help="append each admin action's JSON to this file")
@_bool_flag("--serve", "serve the app to web browsers (textual-serve) instead of this terminal (default false)")
@click.option("--http-address", default="127.0.0.1:4171",
              help="<addr>:<port> to serve on with --serve (default \"127.0.0.1:4171\")")
@click.option("--serve-user", default="", help="with --serve: HTTP basic auth user")
@click.option("--serve-password", default="", envvar="NSQ_ADMIN_SERVE_PASSWORD", show_envvar=True,
              help="with --serve: HTTP basic auth password")
@click.option("--serve-token", default="", envvar="NSQ_ADMIN_SERVE_TOKEN", show_envvar=True,
              help="with --serve: a bearer token accepted instead of basic auth")
def admin(lookupd: tuple[str, ...], nsqd: tuple[str, ...], http_client_connect_timeout: float,
          http_client_request_timeout: float, http_client_tls_cert: str, http_client_tls_key: str,
          http_client_tls_root_ca_file: str, http_client_tls_insecure_skip_verify: bool, http_auth_secret: str,
          notification_http_endpoint: str, admin_users: tuple[str, ...], acl_http_header: str,
          refresh_interval: float, read_only: bool, action_log: str, serve: bool, http_address: str,
          serve_user: str, serve_password: str, serve_token: str) -> None:
    """Browse and administer an NSQ cluster in a terminal UI (nsqadmin).

    Topics, topic, channel and nodes screens refreshed every
    --refresh-interval; actions (create, pause, empty, delete, tombstone)
    ask for a confirmation. Press ? in the app for the keys.
    """
    if not lookupd and not nsqd:
        fail("--lookupd-http-address or --nsqd-http-address required")
    if lookupd and nsqd:
        fail("use --lookupd-http-address or --nsqd-http-address not both")
    if refresh_interval <= 0:
        fail("--refresh-interval should be positive")
    if bool(http_client_tls_cert) != bool(http_client_tls_key):
        fail("--http-client-tls-cert and --http-client-tls-key must be given together")
    read_only = read_only or os.environ.get("NSQ_ADMIN_READ_ONLY", "").strip().lower() in _TRUE

    if serve:
        argv = _app_argv(lookupd, nsqd, http_client_connect_timeout, http_client_request_timeout,
                         http_client_tls_cert, http_client_tls_key, http_client_tls_root_ca_file,
                         http_client_tls_insecure_skip_verify, notification_http_endpoint, admin_users,
                         refresh_interval, read_only, action_log)
        if bool(serve_user) != bool(serve_password):
            fail("--serve-user and --serve-password must be given together")
        if http_auth_secret:
            # the sessions inherit it through the environment (not their command line, which ps shows)
            os.environ["NSQ_AUTH_SECRET"] = http_auth_secret
        try:
            from nsq.tui.serve import serve_admin
        except ImportError as exc:
            fail(f"--serve is not available: {exc}")
        # ServeError (a click exception) prints "Error: ..." and exits 1
        serve_admin(_self_command() + ["admin"] + argv, http_address, read_only=read_only,
                    admin_users=list(admin_users), acl_http_header=acl_http_header,
                    basic_auth=(serve_user, serve_password) if serve_user else None, token=serve_token or None)
        sys.exit(0)

    ssl_context = None
    if http_client_tls_cert or http_client_tls_root_ca_file or http_client_tls_insecure_skip_verify:
        from nsq.client.errors import ClientConfigError
        from nsq.client.tls import client_context

        try:
            ssl_context = client_context(http_client_tls_root_ca_file, http_client_tls_insecure_skip_verify,
                                         http_client_tls_cert, http_client_tls_key)
        except ClientConfigError as exc:
            fail(str(exc))
    try:
        code = _run(list(lookupd), list(nsqd), http_client_connect_timeout, http_client_request_timeout,
                    ssl_context, notification_http_endpoint, list(admin_users), refresh_interval, read_only,
                    action_log, http_auth_secret)
    except ImportError as exc:
        fail(f"the TUI needs textual: {exc}")
    sys.exit(code)


def access(read_only: bool, admin_users: list[str], user: str) -> tuple[bool, str]:
    """(read-only?, why) for ``user``: nsqadmin's rule, only ``--admin-user``s act when any is given."""
    if read_only:
        return True, ""
    if admin_users and user not in admin_users:
        return True, f"{user} is not an --admin-user"
    return False, ""


def _self_command() -> list[str]:
    """How to run ``nsq`` again: this zipapp, or the installed package."""
    script = sys.argv[0] if sys.argv else ""
    if script.endswith(".pyz") and os.path.isfile(script):
        return [sys.executable, os.path.abspath(script)]
    return [sys.executable, "-m", "nsq"]


def _app_argv(lookupd: tuple[str, ...], nsqd: tuple[str, ...], connect_timeout: float, request_timeout: float,
              tls_cert: str, tls_key: str, tls_root_ca_file: str, tls_insecure: bool, endpoint: str,
              admin_users: tuple[str, ...], refresh_interval: float, read_only: bool, action_log: str) -> list[str]:
    """The ``nsq admin`` arguments (no serve flags) each served session runs with."""
    from nsq._internal.durations import format_duration

    argv: list[str] = []
    for a in lookupd:
        argv += ["--lookupd-http-address", a]
    for a in nsqd:
        argv += ["--nsqd-http-address", a]
    argv += ["--http-client-connect-timeout", format_duration(connect_timeout),
             "--http-client-request-timeout", format_duration(request_timeout),
             "--refresh-interval", format_duration(refresh_interval)]
    for flag, value in (("--http-client-tls-cert", tls_cert), ("--http-client-tls-key", tls_key),
                        ("--http-client-tls-root-ca-file", tls_root_ca_file),
                        ("--notification-http-endpoint", endpoint), ("--action-log", action_log)):
        if value:
            argv += [flag, value]
    if tls_insecure:
        argv.append("--http-client-tls-insecure-skip-verify=true")
    for u in admin_users:
        argv += ["--admin-user", u]
    if read_only:
        argv.append("--read-only=true")
    return argv


def _run(lookupd: list[str], nsqd: list[str], connect_timeout: float, request_timeout: float, ssl_context: Any,
         endpoint: str, admin_users: list[str], refresh_interval: float, read_only: bool, action_log: str,
         auth_secret: str = "") -> int:
    from nsq.cluster.actions import Actor
    from nsq.tui.admin import run_admin_app

    actor = Actor.from_env()
    read_only, reason = access(read_only, admin_users, actor.user)
    # run_admin_app hands auth_secret to Cluster (nsq.cluster.poller); given only when set
    extra = {"auth_secret": auth_secret} if auth_secret else {}
    return run_admin_app(lookupd, nsqd, actor=actor, read_only=read_only, read_only_reason=reason,
                         connect_timeout=connect_timeout, request_timeout=request_timeout, ssl_context=ssl_context,
                         notification_http_endpoint=endpoint, action_log=action_log,
                         refresh_interval=refresh_interval, **extra)
