"""A --config TOML value of the wrong type is one line naming the file, the
key and what the key takes."""

from __future__ import annotations

import pytest

from tests.cli.conftest import run_nsq


@pytest.mark.parametrize("command, line, expected", [
    ("nsqd", 'mem_queue_size = "abc"', 'mem_queue_size = "abc": not an integer'),
    ("nsqd", "mem_queue_size = 1.5", "mem_queue_size = 1.5: not an integer"),
    ("nsqd", 'msg_timeout = "soon"',
     'msg_timeout = "soon": not a duration (a Go duration such as "250ms", "2s", "1m0s", or milliseconds)'),
    ("nsqd", 'snappy = "maybe"', 'snappy = "maybe": not a boolean (true or false)'),
    ("nsqd", 'e2e_processing_latency_percentiles = ["x"]',
     'e2e_processing_latency_percentiles = ["x"]: not a number or a list of numbers'),
    ("lookupd", 'tcp_address = ["127.0.0.1:4160"]', 'tcp_address = ["127.0.0.1:4160"]: not a string'),
])
def test_wrong_type_names_file_and_key(tmp_path, command, line, expected):
    cfg = tmp_path / f"{command}.toml"
    cfg.write_text(line + "\n")
    r = run_nsq(command, f"--config={cfg}", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    assert r.returncode == 1
    assert r.stderr.decode() == f"Error: invalid value in config file {cfg}: {expected}\n"


def test_flag_of_wrong_type_names_the_flag_in_plain_words():
    r = run_nsq("nsqd", "--e2e-processing-latency-percentile=0.5,x")
    assert r.returncode == 1
    assert r.stderr.decode() == ("Error: invalid value 'x' for --e2e-processing-latency-percentile: "
                                 "not a number or a list of numbers\n")
