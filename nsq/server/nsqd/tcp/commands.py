"""The V2 commands a connection runs, one function each, as Go's
``nsqd/protocol_v2.go`` has one method per command (``IDENTIFY``, ``SUB``,
``PUB``, ``MPUB``, ``DPUB``, ``RDY``, ``FIN``, ``REQ``, ``TOUCH``, ``AUTH``,
``CLS``, ``NOP``), each taking the client.

Each takes the :class:`~nsq.server.nsqd.tcp.client_v2.ClientV2` and the
command tuple :class:`~nsq.protocol.v2.V2ServerParser` returned (shapes
in nsq/protocol/v2.py), appends its answer to the client's output buffer
and raises :class:`~nsq.protocol.errors.ClientError` for an error the
client is to get (fatal unless E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED).
:data:`HANDLERS` maps the parser's ``CMD_*`` numbers to them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsq.protocol import v2
from nsq.protocol.errors import (
    E_DPUB_FAILED,
    E_FIN_FAILED,
    E_MPUB_FAILED,
    E_PUB_FAILED,
    E_REQ_FAILED,
    E_SUB_FAILED,
    E_TOO_MANY_CHANNEL_CONSUMERS,
    E_TOUCH_FAILED,
    ClientError,
)
from nsq.protocol.frames import CLOSE_WAIT, FRAME_TYPE_RESPONSE, OK, encode_frame
from nsq.server.nsqd.delivery.channel import ChannelError
from nsq.server.nsqd.tcp.identify import negotiate
from nsq.server.nsqd.delivery.replicastore import refusal
from nsq.server.nsqd.delivery.topic import Topic, TopicFull

if TYPE_CHECKING:
    from nsq.server.nsqd.tcp.client_v2 import ClientV2

__all__ = ["HANDLERS"]

_OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, OK)
_CLOSE_WAIT_FRAME = encode_frame(FRAME_TYPE_RESPONSE, CLOSE_WAIT)


def identify(client: ClientV2, cmd: tuple[int, dict[str, Any]]) -> None:
    """IDENTIFY (Go protocol_v2.go ``IDENTIFY``): new settings, the
    answer (``OK``, or JSON with feature negotiation), then the upgrades."""
    _, data = cmd
    nsqd = client.nsqd
    features = client.features
    got = negotiate(data, nsqd.options, client.negotiated, tls_available=nsqd.tls_context is not None,
                    tls=features.tls, compressed=client.codec is not None)
    client.negotiated = got.settings
    client.parser.heartbeats_enabled = got.settings.heartbeat_interval > 0
    client.schedule_heartbeat()
    if got.response is None:
        client.out += _OK_FRAME
        return
    client.out += encode_frame(FRAME_TYPE_RESPONSE, json.dumps(got.response, separators=(",", ":")).encode())
    features.upgrade(client, got)


def auth(client: ClientV2, cmd: tuple[int, bytes]) -> None:
    """AUTH (Go protocol_v2.go ``AUTH``): asks the auth servers (``Features.auth``)."""
    client.features.auth(client, cmd[1])


def sub(client: ClientV2, cmd: tuple[int, str, str]) -> None:
    """SUB (Go protocol_v2.go ``SUB``): joins the channel (created if new).

    Raises:
        ClientError: E_TOO_MANY_CHANNEL_CONSUMERS past ``--max-channel-consumers``.
    """
    _, topic_name, channel_name = cmd
    if client.auth_enabled:
        client.features.check_auth(client, "SUB", topic_name, channel_name)
    if client.nsqd.replica_of:
        raise ClientError(E_SUB_FAILED, f"SUB failed {refusal(client.nsqd.replica_of)}")
    topic = client.nsqd.get_topic(topic_name)
    channel = topic.get_channel(channel_name)
    if not channel.add_client(client):
        raise ClientError(
            E_TOO_MANY_CHANNEL_CONSUMERS,
            f"channel consumers for {topic_name}:{channel_name} exceeds limit of "
            f"{client.nsqd.options.max_channel_consumers}",
        )
    client.channel = channel
    client.out += _OK_FRAME


def _new_topic(client: ClientV2, name: str, code: str, verb: str) -> Topic:
    """The topic a publish creates (a replica refuses it: the leader creates topics)."""
    if client.nsqd.replica_of:
        raise ClientError(code, f"{verb} failed {refusal(client.nsqd.replica_of)}")
    return client.nsqd.get_topic(name)


def _published(client: ClientV2, topic_name: str, n: int) -> None:
    client.pub_counts[topic_name] = client.pub_counts.get(topic_name, 0) + n
    client.out += _OK_FRAME


# PUB and MPUB are the request/response hot path: their topic lookup
# and counting are inline (no get_topic/_published calls)


def pub(client: ClientV2, cmd: tuple[int, str, bytes]) -> None:
    """PUB (Go protocol_v2.go ``PUB``).

    Raises:
        ClientError: E_PUB_FAILED when the topic refuses it (``TopicFull``).
    """
    _, name, body = cmd
    if client.auth_enabled:
        client.features.check_auth(client, "PUB", name, "")
    topic = client.topics.get(name) or _new_topic(client, name, E_PUB_FAILED, "PUB")
    try:
        topic.publish_one(body)
    except TopicFull as exc:
        raise ClientError(E_PUB_FAILED, f"PUB failed {exc}") from None
    counts = client.pub_counts
    counts[name] = counts.get(name, 0) + 1
    client.out += _OK_FRAME


def mpub(client: ClientV2, cmd: tuple[int, str, list[bytes]]) -> None:
    """MPUB (Go protocol_v2.go ``MPUB``).

    Raises:
        ClientError: E_MPUB_FAILED when the topic refuses them (``TopicFull``).
    """
    _, name, bodies = cmd
    if client.auth_enabled:
        client.features.check_auth(client, "MPUB", name, "")
    topic = client.topics.get(name) or _new_topic(client, name, E_MPUB_FAILED, "MPUB")
    n = len(bodies)
    try:
        if n == 1:  # an MPUB of one: a producer waiting for each OK
            topic.publish_one(bodies[0])
        else:
            topic.publish(bodies)
    except TopicFull as exc:
        raise ClientError(E_MPUB_FAILED, f"MPUB failed {exc}") from None
    counts = client.pub_counts
    counts[name] = counts.get(name, 0) + n
    client.out += _OK_FRAME


def dpub(client: ClientV2, cmd: tuple[int, str, int, bytes]) -> None:
    """DPUB (Go protocol_v2.go ``DPUB``): deferred by ``cmd[2]`` ms.

    Raises:
        ClientError: E_DPUB_FAILED when the topic refuses it (``TopicFull``).
    """
    _, topic, defer_ms, body = cmd
    if client.auth_enabled:
        client.features.check_auth(client, "DPUB", topic, "")
    try:
        (client.topics.get(topic) or _new_topic(client, topic, E_DPUB_FAILED, "DPUB")).publish_one(body, defer_ms)
    except TopicFull as exc:
        raise ClientError(E_DPUB_FAILED, f"DPUB failed {exc}") from None
    _published(client, topic, 1)


def rdy(client: ClientV2, cmd: tuple[int, int]) -> None:
    """RDY (Go protocol_v2.go ``RDY``): the client's new ready count."""
    _, client.ready_count = cmd
    if client.channel is not None:
        client.channel.client_ready(client)


def fin(client: ClientV2, cmd: tuple[int, bytes]) -> None:
    """FIN (Go protocol_v2.go ``FIN``).

    Raises:
        ClientError: E_FIN_FAILED (not fatal) for an id not in flight for this client.
    """
    _, msg_id = cmd
    channel = client.channel
    # the parser refuses FIN/REQ/TOUCH before SUB, and a failed SUB is fatal
    assert channel is not None
    try:
        channel.finish(client, msg_id)
    except ChannelError as exc:
        raise ClientError(E_FIN_FAILED, f"FIN {msg_id.decode('latin-1')} failed {exc}") from None
    client.finish_count += 1
    client.message_done()


def fin_many(client: ClientV2, cmd: tuple[int, list[bytes]]) -> None:
    """FINs that arrived back to back: the same as one :func:`fin` each,
    in order (a failed one answers E_FIN_FAILED, not fatal)."""
    _, msg_ids = cmd
    channel = client.channel
    assert channel is not None
    failed = channel.finish_many(client, msg_ids)
    for msg_id, reason in failed:
        client.client_error(ClientError(E_FIN_FAILED, f"FIN {msg_id.decode('latin-1')} failed {reason}"))
    done = len(msg_ids) - len(failed)
    if done:
        client.finish_count += done
        client.in_flight_count -= done
        client.freed = True


def req(client: ClientV2, cmd: tuple[int, bytes, int]) -> None:
    """REQ (Go protocol_v2.go ``REQ``): requeued after ``cmd[2]`` ms.

    Raises:
        ClientError: E_REQ_FAILED (not fatal) for an id not in flight for this client.
    """
    _, msg_id, timeout_ms = cmd
    channel = client.channel
    assert channel is not None
    try:
        channel.requeue(client, msg_id, timeout_ms)
    except ChannelError as exc:
        raise ClientError(E_REQ_FAILED, f"REQ {msg_id.decode('latin-1')} failed {exc}") from None
    client.requeue_count += 1
    client.message_done()


def touch(client: ClientV2, cmd: tuple[int, bytes]) -> None:
    """TOUCH (Go protocol_v2.go ``TOUCH``): the message's timeout starts again.

    Raises:
        ClientError: E_TOUCH_FAILED (not fatal) for an id not in flight for this client.
    """
    _, msg_id = cmd
    channel = client.channel
    assert channel is not None
    try:
        channel.touch(client, msg_id)
    except ChannelError as exc:
        raise ClientError(E_TOUCH_FAILED, f"TOUCH {msg_id.decode('latin-1')} failed {exc}") from None


def cls(client: ClientV2, cmd: tuple[int]) -> None:
    """CLS (Go protocol_v2.go ``CLS``): RDY 0, answered ``CLOSE_WAIT``."""
    client.ready_count = 0
    client.closing = True
    if client.channel is not None:
        client.channel.client_ready(client)
    client.out += _CLOSE_WAIT_FRAME


def nop(client: ClientV2, cmd: tuple[int]) -> None:
    """NOP: nothing (a heartbeat's answer)."""
    return None


#: the command function for each ``CMD_*`` number of nsq/protocol/v2.py
HANDLERS: dict[int, Callable[[ClientV2, Any], None]] = {
    v2.CMD_IDENTIFY: identify,
    v2.CMD_AUTH: auth,
    v2.CMD_SUB: sub,
    v2.CMD_PUB: pub,
    v2.CMD_MPUB: mpub,
    v2.CMD_DPUB: dpub,
    v2.CMD_RDY: rdy,
    v2.CMD_FIN: fin,
    v2.CMD_FIN_MANY: fin_many,
    v2.CMD_REQ: req,
    v2.CMD_TOUCH: touch,
    v2.CMD_CLS: cls,
    v2.CMD_NOP: nop,
}
