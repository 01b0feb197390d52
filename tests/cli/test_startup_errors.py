"""A daemon that cannot start says so in one line, ``Error: ...``, naming
the address and the listener, exits 1, logs nothing before it and leaves no
file behind (real subprocesses in a scratch working directory)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.cli.conftest import NSQ


@pytest.fixture
def busy():
    """A loopback address something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


def run_in(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(NSQ + list(args), cwd=cwd, capture_output=True, timeout=30, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def assert_one_error_line(r: subprocess.CompletedProcess, expected: str) -> None:
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"Error: {expected}\n"
    assert r.stdout == ""


@pytest.mark.parametrize("flags, expected", [
    (["--tcp-address=nonsense"], "cannot listen on nonsense (TCP): missing port (host:port)"),
    (["--tcp-address=127.0.0.1:70000"], "cannot listen on 127.0.0.1:70000 (TCP): port 70000 out of range (0-65535)"),
    (["--http-address=127.0.0.1:http"], "cannot listen on 127.0.0.1:http (HTTP): port 'http' is not a number"),
], ids=["no-port", "port-range", "port-word"])
def test_nsqd_bad_address(tmp_path, flags, expected):
    # no --data-path: the cwd (Go's default) must stay empty
    r = run_in(tmp_path, "nsqd", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *flags)
    assert_one_error_line(r, expected)
    assert os.listdir(tmp_path) == []


def test_nsqd_unknown_host(tmp_path):
    r = run_in(tmp_path, "nsqd", "--tcp-address=no-such-host.invalid:0", "--http-address=127.0.0.1:0")
    # the resolver's words: offline machines answer "temporary failure in name resolution"
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("Error: cannot listen on no-such-host.invalid:0 (TCP): ")
    assert r.stderr.rstrip().endswith(("name or service not known", "temporary failure in name resolution"))
    assert os.listdir(tmp_path) == []


def test_nsqd_http_port_in_use(tmp_path, busy):
    r = run_in(tmp_path, "nsqd", "--tcp-address=127.0.0.1:0", f"--http-address={busy}")
    assert_one_error_line(r, f"cannot listen on {busy} (HTTP): address already in use")
    assert os.listdir(tmp_path) == []  # no nsqd.dat, no nsqd.reserve


def test_nsqd_tcp_port_in_use_with_data_path(tmp_path, busy):
    data = tmp_path / "data"
    data.mkdir()
    r = run_in(tmp_path, "nsqd", f"--tcp-address={busy}", "--http-address=127.0.0.1:0", f"--data-path={data}")
    assert_one_error_line(r, f"cannot listen on {busy} (TCP): address already in use")
    assert os.listdir(data) == []


def test_nsqd_data_path_in_use_leaves_no_file(tmp_path):
    import fcntl

    fd = os.open(tmp_path, os.O_RDONLY)  # the lock another nsqd holds (Go's dirlock)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = run_in(tmp_path, "nsqd", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    finally:
        os.close(fd)
    assert_one_error_line(r, f"--data-path={tmp_path} in use (possibly by another instance of nsqd)")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("which", ["tcp", "http"])
def test_lookupd_port_in_use(tmp_path, busy, which):
    flags = {"tcp": "--tcp-address=127.0.0.1:0", "http": "--http-address=127.0.0.1:0"}
    flags[which] = f"--{which}-address={busy}"
    r = run_in(tmp_path, "lookupd", *flags.values())
    assert_one_error_line(r, f"cannot listen on {busy} ({which.upper()}): address already in use")


def test_lookupd_bad_address(tmp_path):
    r = run_in(tmp_path, "lookupd", "--tcp-address=nonsense", "--http-address=127.0.0.1:0")
    assert_one_error_line(r, "cannot listen on nonsense (TCP): missing port (host:port)")


def test_admin_serve_port_in_use(tmp_path, busy):
    r = run_in(tmp_path, "admin", "--serve", f"--http-address={busy}", "--nsqd-http-address=127.0.0.1:4151")
    assert_one_error_line(r, f"cannot listen on {busy} (HTTP): address already in use")
