"""Sans-IO NSQ wire formats: frames, commands, messages, names, errors.

Nothing here touches a socket, an event loop or a clock.
"""

from nsq.protocol import commands
from nsq.protocol.errors import NON_FATAL_CODES, ClientError, NSQError, ProtocolError, ReadError
from nsq.protocol.frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    OK,
    FrameReader,
    encode_frame,
)
from nsq.protocol.message import (
    DecodedMessage,
    IDFactory,
    decode_message,
    default_node_id,
    encode_message,
    encode_message_frame,
)
from nsq.protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name
from nsq.protocol.v2 import Limits, V2ServerParser

__all__ = [
    "commands",
    "NSQError",
    "ClientError",
    "ProtocolError",
    "ReadError",
    "NON_FATAL_CODES",
    "MAGIC_V2",
    "FRAME_TYPE_RESPONSE",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "HEARTBEAT",
    "OK",
    "CLOSE_WAIT",
    "encode_frame",
    "FrameReader",
    "DecodedMessage",
    "IDFactory",
    "decode_message",
    "default_node_id",
    "encode_message",
    "encode_message_frame",
    "is_valid_topic_name",
    "is_valid_channel_name",
    "is_ephemeral",
    "Limits",
    "V2ServerParser",
]
