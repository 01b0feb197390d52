"""An ephemeral channel or topic drops what overflows --mem-queue-size (as
Go nsqd, which says nothing); ours logs how many, at most once per
``DiscardBackend.REPORT_EVERY`` seconds per queue, naming the queue."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nsq.server.nsqd.storage.backend import DiscardBackend
from tests.server.helpers import HTTP


def _drop_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]


async def _mpub(http: HTTP, topic: str, n: int) -> None:
    status, body = await http.post("/mpub", "\n".join(str(i) for i in range(n)), topic=topic)
    assert status == 200, body


@pytest.fixture
def quick_reports(monkeypatch):
    monkeypatch.setattr(DiscardBackend, "REPORT_EVERY", 0.3)


async def test_ephemeral_channel_overflow_is_logged_per_period(make_nsqd, session, caplog, quick_reports):
    nsqd = await make_nsqd(mem_queue_size=10)
    http = HTTP(session, nsqd.http_port)
    caplog.set_level(logging.INFO, logger="nsq")
    await http.post("/topic/create", topic="dur")
    status, _ = await http.post("/channel/create", topic="dur", channel="tail#ephemeral")
    assert status == 200
    await _mpub(http, "dur", 50)  # 10 kept, 40 dropped: reported at once
    assert _drop_lines(caplog) == [
        "CHANNEL(dur:tail#ephemeral): dropped 40 messages since the last report "
        "(memory queue full: --mem-queue-size=10, an ephemeral channel has no disk queue)"]
    record = next(r for r in caplog.records if "dropped" in r.getMessage())
    assert record.name == "nsq.nsqd" and record.levelno == logging.WARNING
    # within the period: added up, one line when it ends
    for _ in range(3):
        await _mpub(http, "dur", 5)
    assert len(_drop_lines(caplog)) == 1
    await asyncio.sleep(0.5)
    assert _drop_lines(caplog)[1:] == [
        "CHANNEL(dur:tail#ephemeral): dropped 15 messages since the last report "
        "(memory queue full: --mem-queue-size=10, an ephemeral channel has no disk queue)"]
    # nothing dropped: no line
    await asyncio.sleep(0.5)
    assert len(_drop_lines(caplog)) == 2


async def test_ephemeral_topic_overflow_is_logged(make_nsqd, session, caplog, quick_reports):
    nsqd = await make_nsqd(mem_queue_size=3)
    http = HTTP(session, nsqd.http_port)
    caplog.set_level(logging.INFO, logger="nsq")
    await _mpub(http, "t#ephemeral", 4)  # no channel: the topic holds 3
    assert _drop_lines(caplog) == [
        "TOPIC(t#ephemeral): dropped 1 message since the last report "
        "(memory queue full: --mem-queue-size=3, an ephemeral topic has no disk queue)"]


async def test_drops_pending_at_delete_are_reported(make_nsqd, session, caplog, quick_reports):
    nsqd = await make_nsqd(mem_queue_size=2)
    http = HTTP(session, nsqd.http_port)
    caplog.set_level(logging.INFO, logger="nsq")
    await http.post("/topic/create", topic="d")
    await http.post("/channel/create", topic="d", channel="c#ephemeral")
    await _mpub(http, "d", 3)
    await _mpub(http, "d", 4)
    assert len(_drop_lines(caplog)) == 1
    status, _ = await http.post("/channel/delete", topic="d", channel="c#ephemeral")
    assert status == 200
    assert _drop_lines(caplog)[1:] == [
        "CHANNEL(d:c#ephemeral): dropped 4 messages since the last report "
        "(memory queue full: --mem-queue-size=2, an ephemeral channel has no disk queue)"]


async def test_durable_overflow_is_not_reported(make_nsqd, session, caplog, tmp_path):
    nsqd = await make_nsqd(mem_queue_size=2, data_path=str(tmp_path))
    http = HTTP(session, nsqd.http_port)
    caplog.set_level(logging.INFO, logger="nsq")
    await http.post("/topic/create", topic="k")
    await http.post("/channel/create", topic="k", channel="c")
    await _mpub(http, "k", 10)
    assert _drop_lines(caplog) == []
