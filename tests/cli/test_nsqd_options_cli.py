"""`nsq nsqd` / `nsq lookupd` start-up checks: data path, config keys, --help."""

from __future__ import annotations

import json

from tests.cli.conftest import NSQ, NSQDProcess, free_port, run_nsq


def test_nsqd_refuses_a_data_path_that_does_not_exist(tmp_path):
    missing = tmp_path / "no" / "such"
    r = run_nsq("nsqd", f"--data-path={missing}", f"--tcp-address=127.0.0.1:{free_port()}",
                f"--http-address=127.0.0.1:{free_port()}", timeout=20)
    assert r.returncode != 0
    err = r.stderr.decode().strip()
    assert len(err.splitlines()) == 1, err
    assert str(missing) in err and "no such file or directory" in err and "Traceback" not in err
    assert not missing.exists() and not missing.parent.exists()


def test_nsqd_config_accepts_the_flag_name_of_the_percentile_key(tmp_path):
    for key in ("e2e_processing_latency_percentile", "e2e_processing_latency_percentiles"):
        cfg = tmp_path / f"{key}.toml"
        cfg.write_text(f"{key} = [0.5, 0.99]\n")
        d = NSQDProcess(NSQ, [f"--config={cfg}"])
        try:
            assert json.loads(d.get("/config/e2e_processing_latency_percentiles")) == [0.99, 0.5], key
        finally:
            assert d.stop() == 0


def test_unknown_config_key_is_an_error_naming_it(tmp_path):
    for daemon, good in (("nsqd", "mem_queue_size = 3"), ("lookupd", 'inactive_producer_timeout = "300s"')):
        cfg = tmp_path / f"{daemon}.toml"
        cfg.write_text(f"{good}\nmem_queue_sise = 4\n")
        r = run_nsq(daemon, f"--config={cfg}", f"--tcp-address=127.0.0.1:{free_port()}",
                    f"--http-address=127.0.0.1:{free_port()}", timeout=20)
        err = r.stderr.decode()
        assert r.returncode != 0, daemon
        assert "mem_queue_sise" in err and "Traceback" not in err, err


def test_nsqd_help_shows_each_default_once(script_runner):
    r = script_runner.run(["nsq", "nsqd", "--help"])
    assert r.success
    text = " ".join(r.stdout.split())
    for doubled in ("hostname) (default OS hostname)", "unlimited) (default 0)",
                    "hash of hostname) (default hash", "current directory) (default", "listening to) (default"):
        assert doubled not in text, doubled
    assert "(default 10000)" in text  # the others still show theirs


def test_nsqd_logs_the_lookupd_peer_info_as_go_does():
    from tests.cli.test_lookupd_cli import LookupdProcess, poll

    lookupd = LookupdProcess()
    d = None
    try:
        d = NSQDProcess(NSQ, [f"--lookupd-tcp-address={lookupd.tcp}", "--broadcast-address=127.0.0.1"])
        assert poll(lambda: lookupd.get_json("/nodes")["producers"])
    finally:
        if d is not None:
            d.proc.terminate()
            d.proc.wait(10)
            err = d.proc.stderr.read().decode()
            d.stop()
        lookupd.stop()
    line = next(x for x in err.splitlines() if "peer info" in x)
    assert f"peer info {{TCPPort:{lookupd.tcp_port} HTTPPort:{lookupd.http_port} Version:" in line, line
    assert "BroadcastAddress:127.0.0.1}" in line and "'" not in line, line
