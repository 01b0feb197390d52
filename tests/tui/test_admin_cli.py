"""The ``nsq admin`` command: flags, read-only rules, the --serve hand-off,
and the real app in a pseudo-terminal as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

import nsq.commands.admin as admin_cmd
from nsq.cli import cli
from tests.cli.conftest import NSQ
from tests.tui.conftest import run_in_pty


def test_help_lists_nsqadmin_flags_and_nsq_help_stays_light():
    r = CliRunner().invoke(cli, ["admin", "--help"])
    assert r.exit_code == 0, r.output
    for flag in ("--lookupd-http-address", "--nsqd-http-address", "--http-client-connect-timeout",
                 "--http-client-request-timeout", "--notification-http-endpoint", "--http-client-tls-cert",
                 "--http-client-tls-key", "--http-client-tls-root-ca-file", "--http-client-tls-insecure-skip-verify",
                 "--admin-user", "--acl-http-header", "--refresh-interval", "--read-only", "--serve",
                 "--http-address", "--serve-user", "--serve-password", "--serve-token"):
        assert flag in r.output
    assert "admin" in CliRunner().invoke(cli, ["--help"]).output
    code = "import sys, nsq.cli, nsq.commands.admin; print(sorted(m for m in sys.modules if m.startswith('textual')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("args, message", [
    ([], "--lookupd-http-address or --nsqd-http-address required"),
    (["--lookupd-http-address=a:1", "--nsqd-http-address=b:2"], "not both"),
    (["--nsqd-http-address=b:2", "--refresh-interval=0s"], "--refresh-interval should be positive"),
    (["--nsqd-http-address=b:2", "--http-client-tls-cert=x.pem"], "must be given together"),
    (["--nsqd-http-address=b:2", "--serve", "--serve-user=ops"], "must be given together"),
])
def test_bad_flags_fail_with_one_line(args, message):
    r = CliRunner().invoke(cli, ["admin", *args])
    assert r.exit_code == 1
    assert message in r.output and "Traceback" not in r.output


def test_read_only_from_flag_env_or_admin_users(monkeypatch):
    seen = []
    monkeypatch.setattr(admin_cmd, "_run", lambda *a: seen.append(a[8]) or 0)
    runner = CliRunner()
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2"]).exit_code == 0
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2", "--read-only"]).exit_code == 0
    assert runner.invoke(cli, ["admin", "-nsqd-http-address=b:2", "-read-only=true"]).exit_code == 0
    monkeypatch.setenv("NSQ_ADMIN_READ_ONLY", "1")
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2"]).exit_code == 0
    assert seen == [False, True, True, True]
    assert admin_cmd.access(False, [], "bob") == (False, "")
    assert admin_cmd.access(False, ["alice"], "alice") == (False, "")
    assert admin_cmd.access(False, ["alice"], "bob") == (True, "bob is not an --admin-user")
    assert admin_cmd.access(True, ["alice"], "alice") == (True, "")


def test_serve_hands_the_app_command_line_to_serve_admin(monkeypatch):
    import nsq.tui.serve as serve

    calls = []
    monkeypatch.setattr(serve, "serve_admin", lambda argv, address, **kw: calls.append((argv, address, kw)))
    r = CliRunner().invoke(cli, ["admin", "--lookupd-http-address=10.0.0.9:4161", "--serve",
                                 "--http-address=0.0.0.0:4171", "--serve-user=ops", "--serve-password=s3cret",
                                 "--admin-user=ops", "--notification-http-endpoint=http://n/x",
                                 "--refresh-interval=5s"])
    assert r.exit_code == 0, r.output
    (argv, address, kw), = calls
    assert address == "0.0.0.0:4171"
    assert argv[:4] == [sys.executable, "-m", "nsq", "admin"]
    args = argv[4:]
    assert args[:2] == ["--lookupd-http-address", "10.0.0.9:4161"]
    assert "--notification-http-endpoint" in args and "--refresh-interval" in args and "5s" in args
    assert not any(a.startswith(("--serve", "--http-address")) for a in args)
    assert "s3cret" not in argv
    assert kw == {"read_only": False, "admin_users": ["ops"], "acl_http_header": "X-Forwarded-User",
                  "basic_auth": ("ops", "s3cret"), "token": None}
    # the session command line parses
    monkeypatch.setattr(admin_cmd, "_run", lambda *a: 0)
    assert CliRunner().invoke(cli, ["admin", *args]).exit_code == 0


def test_the_app_runs_in_a_terminal_and_quits_on_q(nsqd_proc):  # noqa: F811
    nsqd_proc.post("/topic/create?topic=terminal_topic")
    sent = []

    def quit_once_shown(out: bytes) -> bytes | None:
        if not sent and b"terminal_topic" in out:
            sent.append(True)
            return b"q"
        return None

    code, out = run_in_pty(NSQ + ["admin", f"--nsqd-http-address={nsqd_proc.http}", "--refresh-interval=200ms"],
                           {"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30", "NSQ_ADMIN_USER": "tester"},
                           40, quit_once_shown)
    assert sent, out[-2000:]
    assert code == 0, out[-2000:]
    assert b"\x1b[?1049h" in out  # Textual's alternate screen
    assert b"user tester" in out


def test_tls_client_flags_build_the_context(monkeypatch, tmp_path):
    import ssl

    from tests.tlsutil import make_pki

    pki = make_pki(tmp_path)
    seen = []
    monkeypatch.setattr(admin_cmd, "_run", lambda *a: seen.append(a[4]) or 0)
    runner = CliRunner()
    r = runner.invoke(cli, ["admin", "--nsqd-http-address=https://b:2", f"--http-client-tls-root-ca-file={pki.ca}",
                            f"--http-client-tls-cert={pki.client_cert}", f"--http-client-tls-key={pki.client_key}"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["admin", "--nsqd-http-address=https://b:2", "--http-client-tls-insecure-skip-verify"])
    assert r.exit_code == 0, r.output
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2"]).exit_code == 0
    verified, insecure, none = seen
    assert verified.verify_mode == ssl.CERT_REQUIRED and insecure.verify_mode == ssl.CERT_NONE and none is None
    r = runner.invoke(cli, ["admin", "--nsqd-http-address=b:2", "--http-client-tls-root-ca-file=/nonexistent"])
    assert r.exit_code == 1 and "TLS" in r.output
