"""The utilities and nsqd flags with TLS/compression, end to end (subprocesses)."""

from __future__ import annotations

import subprocess

import pytest

from tests.cli.conftest import NSQ, NSQDProcess, run_nsq
from tests.tlsutil import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_pub_and_tail_over_tls_with_snappy(pki):
    d = NSQDProcess(NSQ, [f"--tls-cert={pki.server_cert}", f"--tls-key={pki.server_key}", "--tls-required=tcp-https"])
    try:
        tls = ["--producer-opt=tls_v1", f"--producer-opt=tls_root_ca_file,{pki.ca}"]
        r = run_nsq("pub", "--topic=sec", f"--nsqd-tcp-address={d.tcp}", *tls, "--producer-opt=snappy", "a", "b")
        assert r.returncode == 0, r.stderr
        # without TLS the daemon refuses the publish
        r = run_nsq("pub", "--topic=sec", f"--nsqd-tcp-address={d.tcp}", "c")
        assert r.returncode != 0 and b"TLS required" in r.stderr
        r = run_nsq("tail", "--topic=sec", "--channel=c", f"--nsqd-tcp-address={d.tcp}", "-n", "2",
                    "--consumer-opt=tls_v1", f"--consumer-opt=tls_root_ca_file,{pki.ca}",
                    "--consumer-opt=deflate", timeout=30)
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.splitlines()) == [b"a", b"b"]
    finally:
        assert d.stop() == 0


def test_nsqd_tls_flag_errors_are_clean(tmp_path):
    r = subprocess.run(NSQ + ["nsqd", "--tls-required=true", f"--data-path={tmp_path}",
                              "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
                       capture_output=True, timeout=20)
    assert r.returncode == 1
    assert b"cannot require TLS client connections without TLS key and cert" in r.stderr
    assert b"Traceback" not in r.stderr
