"""One V2 TCP connection: an ``asyncio.Protocol`` around the sans-IO parser.

Bytes in -> :class:`~nsq.protocol.v2.V2ServerParser` -> commands executed
against topics/channels (:mod:`nsq.server.nsqd.tcp.commands`, one function per
command) -> frames appended to an output buffer that the daemon flushes
once per event-loop turn (coalesced writes, as Go's bufio writer,
:mod:`nsq.server.nsqd.tcp.output`). Go: nsqd/protocol_v2.go ``IOLoop``/``Exec``
and nsqd/client_v2.go.
IDENTIFY's settings are :func:`nsq.server.nsqd.tcp.identify.negotiate`'s (kept
as :attr:`ClientV2.negotiated`); the TLS/compression upgrades and AUTH are
:class:`nsq.server.nsqd.tcp.features.Features` (``ClientV2.features``).
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from typing import TYPE_CHECKING, Any, cast

from nsq._internal.addresses import fmt_addr
from nsq.protocol import v2
from nsq.protocol.compression import Codec, CompressionError
from nsq.protocol.errors import E_INVALID, E_PUB_FAILED, ClientError
from nsq.protocol.message import MSG_FRAME_HDR as _MSG_FRAME_HDR
from nsq.protocol.frames import CLOSE_WAIT, FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, HEARTBEAT, OK, encode_frame
from nsq.server.nsqd.delivery.host import TURN_BYTES
from nsq.server.nsqd.storage.backend import NotReplicated
from nsq.server.nsqd.tcp.commands import HANDLERS, fin
from nsq.server.nsqd.tcp.features import Features, Suspend
from nsq.server.nsqd.tcp.identify import Negotiated, initial

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.storage.message import Message
    from nsq.server.nsqd.delivery.host import DaemonHost

__all__ = ["ClientV2"]

log = logging.getLogger("nsq.nsqd")
_BODY = operator.itemgetter(1)  # of a Message

_OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, OK)
_HEARTBEAT_FRAME = encode_frame(FRAME_TYPE_RESPONSE, HEARTBEAT)
_CLOSE_WAIT_FRAME = encode_frame(FRAME_TYPE_RESPONSE, CLOSE_WAIT)

_COMMAND_NAMES = {
    v2.CMD_IDENTIFY: "IDENTIFY", v2.CMD_AUTH: "AUTH", v2.CMD_SUB: "SUB", v2.CMD_PUB: "PUB", v2.CMD_MPUB: "MPUB",
    v2.CMD_DPUB: "DPUB", v2.CMD_RDY: "RDY", v2.CMD_FIN: "FIN", v2.CMD_REQ: "REQ", v2.CMD_TOUCH: "TOUCH",
    v2.CMD_CLS: "CLS", v2.CMD_NOP: "NOP", v2.CMD_FIN_MANY: "FIN",
}


class ClientV2(asyncio.Protocol):
    """A client connection speaking protocol V2.

    Attributes:
        id: daemon-wide client number.
        negotiated: the settings its last IDENTIFY left (client_id,
            hostname, user_agent, heartbeat_interval, output buffer,
            sample_rate, msg_timeout; before IDENTIFY, Go's defaults and
            the remote IP).
        features: the TLS / compression upgrades done and the AUTH state.
        codec: the compression codec once upgraded, else None.
        ready_count: the client's RDY.
        in_flight_count: messages sent and not finished/requeued/timed out.
        message_count, finish_count, requeue_count: counters for /stats.
        channel: the subscribed channel, or None.
        pub_counts: messages published per topic (producer stats).
    """

    def __init__(self, nsqd: DaemonHost, client_id: int) -> None:
        opts = nsqd.options
        self.nsqd = nsqd
        self.id = client_id
        self.parser = v2.V2ServerParser(nsqd.limits)
        self.transport: asyncio.Transport | None = None
        self.out = bytearray()
        self.dirty = False
        self.closing = False
        self.closed = False
        self.remote_address = ""
        self.negotiated: Negotiated = initial(opts)
        self.connect_ts = int(time.time())
        self.ready_count = 0
        self.in_flight_count = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.channel: Channel | None = None
        self.pub_counts: dict[str, int] = {}
        #: upgrades (IDENTIFY tls_v1 / snappy / deflate) and AUTH
        self.features = Features()
        self.codec: Codec | None = None
        #: commands other than IDENTIFY need TLS first (--tls-required true/tcp-https)
        self._tls_policy = nsqd.tls_required != "false"
        #: AUTH is on (--auth-http-address): commands check it first
        self.auth_enabled = bool(opts.auth_http_addresses)
        #: the daemon's topics by name (the same dict, never rebound)
        self.topics = nsqd.topics
        #: the daemon's output writer (coalesced per loop turn)
        self._output = nsqd.output
        self._spinner = nsqd.spinner
        self._pub_spinner = nsqd.pub_spinner
        #: a read holding one PUB/MPUB may skip the command buffer (no
        #: TLS-first policy, no AUTH: nothing to check before it runs)
        self._lane = not self._tls_policy and not self.auth_enabled
        #: nsqd's owed fsyncs (--sync-every=1), tested after each command
        self._owed = nsqd.disk.owed
        self._retry: tuple[Any, ...] | None = None
        self._lost = False
        self.last_recv = 0.0
        #: a FIN/REQ of this read freed RDY room: refill once at its end
        self.freed = False
        #: the transport's buffer is above its high-water mark: no reading,
        #: no new messages until it drains (Go blocks this client's IO loop)
        self.write_paused = False
        #: this turn's output holds :attr:`OUT_BUDGET`: no new messages until written
        self.out_full = False
        #: the codec holds input not inflated yet (answers waiting to be written)
        self._more_input = False
        self._waiting: asyncio.Future[Any] | None = None
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    def __repr__(self) -> str:
        return f"client({self.remote_address})"

    @property
    def state(self) -> int:
        """Go's client state number (0 init, 3 subscribed, 4 closing)."""
        return self.parser.state

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's: it writes
        peer = transport.get_extra_info("peername")
        if peer:
            host = peer[0]
            self.remote_address = fmt_addr(host, peer[1])
            self.negotiated = initial(self.nsqd.options, host)
        self.last_recv = self._loop.time()
        self.nsqd.add_client(self)
        log.info("TCP: new client(%s)", self.remote_address)
        self.schedule_heartbeat()

    def data_received(self, data: bytes) -> None:
        self.last_recv = self._loop.time()
        if self._spinner is not None:
            self._spinner.touch(self.last_recv)
        if self._waiting is not None and self.transport is not None:
            # bytes while an answer waits (fsync, replicas): held, and reading stops
            # until it is sent; a client that waits for each answer never gets here
            self.transport.pause_reading()
        try:
            if self.codec is None:
                if len(data) == 21 and self.channel is not None and self._fin_read(data):
                    return
                if (self._lane and len(data) <= self.PUBLISH_READ and self._waiting is None and not self.closed
                        and self._publish_read(data)):
                    return
                self.parser.feed(data)
                if self._waiting is None:
                    self._process(len(data) <= self.SMALL_READ)
            else:
                self._decode(data)
        except Exception:
            # a bug must cost one connection, never the daemon
            log.exception("[%s] internal error reading from the client, closing", self.remote_address)
            self.close()

    #: stream bytes inflated per step (bytes); a command larger than this
    #: takes several steps, never more than ``parser.max_command_size``
    DECODE_STEP = 64 * 1024
    #: answers held in ``out`` before inflating stops until they are written
    OUT_HIGH_WATER = 64 * 1024

    def _decode(self, data: bytes) -> None:
        """Decompress ``data`` a bounded piece at a time, each piece parsed
        and run before the next is inflated. Inflating stops (reading too)
        while this client's answers wait to be written, and goes on from
        :meth:`flush` or :meth:`resume_writing`: a small compressed input
        that inflates to gigabytes, or to millions of answered commands,
        costs one step's worth of memory, not its inflated size."""
        codec = self.codec
        assert codec is not None  # called only once a codec is set
        parser = self.parser
        self._more_input = False
        while not self.closed:
            room = min(parser.max_command_size - parser.buffered, self.DECODE_STEP)
            try:
                out = codec.decode(data, room)
            except CompressionError as exc:
                log.error("[%s] - %s, closing", self.remote_address, exc)
                self.close()
                return
            data = b""
            if out:
                parser.feed(out)
            if self._waiting is None:
                self._process()
            if not codec.pending or self._waiting is not None or self.closed:
                return
            if parser.buffered >= parser.max_command_size:
                log.error("[%s] - command larger than %d bytes, closing", self.remote_address,
                          parser.max_command_size)
                self.close()
                return
            if len(self.out) >= self.OUT_HIGH_WATER or self.write_paused:
                self._more_input = True
                if self.transport is not None:
                    self.transport.pause_reading()
                return

    #: a read of at most this many bytes (one PUB, a FIN, a RDY) is taken
    #: for request/response traffic: its answers, and the messages it made
    #: for other clients, are written at once instead of at the end of the
    #: loop turn (bytes)
    SMALL_READ = 1024
    #: a read of at most this many bytes holding one whole PUB or MPUB takes :meth:`_publish_read` (bytes);
    #: a larger MPUB's deliveries wait for the end of the turn, coalesced with other reads'
    PUBLISH_READ = 8192

    def _process(self, small: bool = False) -> None:
        """Execute every complete command buffered, in order.

        Output is written at the end of the event-loop turn, coalesced, or
        at once after a ``small`` read (latency over batching: Go writes
        every response as it is made and messages when nothing else is
        pending, ``protocol_v2.go`` ``Send`` and ``messagePump``); a TLS or
        compressed connection's output at once too, before other deliveries.
        """
        parser = self.parser
        handlers = HANDLERS
        nsqd = self.nsqd
        # a small read writes at its end (flush_now): what its commands make
        # for any client needs no end-of-turn callback meanwhile
        output = self._output
        held = small and output.hold()
        while not self.closed:
            cmd = None
            try:
                if self._retry is not None:
                    cmd, self._retry = self._retry, None
                else:
                    cmd = parser.next_command()
                    if cmd is None:
                        break
                kind = cmd[0]  # the CMD_* constant; the rest as protocol/v2.py lists
                if self._tls_policy and not self.features.tls and kind != v2.CMD_IDENTIFY:
                    raise ClientError(E_INVALID, f"cannot {_COMMAND_NAMES[kind]} in current state (TLS required)")
                handlers[kind](self, cmd)
            except Suspend as wait:
                if wait.retry:
                    self._retry = cmd
                self._suspend(wait)
                break
            except ClientError as exc:
                self.client_error(exc)
                if exc.fatal:
                    break
            except Exception:
                # a bug must cost one connection, never the daemon
                log.exception("[%s] internal error handling a command, closing", self.remote_address)
                self.close()
                break
            if self._owed:
                # --sync-every=1: what this command wrote must be fsynced (DataPath.durability_barrier)
                # before its answer goes out and before the next command runs
                barrier = nsqd.durability_barrier()
                if barrier is not None:
                    self._wait_for(barrier)
                    break
            if parser.drained:
                break  # nothing more buffered: spare the call that says so
        if self.freed:
            self._refill()
        if small:
            output.flush_now(self, held)
        elif (self.out and (self.codec is not None or self.features.tls) and self.parser.drained and not self.dirty
              and not self.closed and self._waiting is None):
            self.flush()  # its OK (a refill) now: the turn's end encrypts/compresses all deliveries
        else:
            self._mark_dirty()

    def _publish_read(self, data: bytes) -> bool:
        """If ``data`` is one whole PUB or MPUB and nothing else
        (:meth:`V2ServerParser.take_publish`), run it and write its answer
        now, as :meth:`_process` does after a small read, without buffering
        it first: a producer that waits for each ``OK`` costs the parse,
        the publish and one write. False: ``data`` is for the usual path."""
        try:
            cmd = self.parser.take_publish(data)  # raises ClientError as next_command would
        except ClientError as exc:
            self.client_error(exc)  # fatal: flushes and closes
            return True
        if cmd is None:
            return False
        if cmd[0] == v2.CMD_PUB and self._pub_spinner is not None:
            self._pub_spinner.touch_alone(self, self.last_recv)
        held = self._output.hold()
        try:
            HANDLERS[cmd[0]](self, cmd)
        except ClientError as exc:
            self.client_error(exc)
        except Exception:
            # a bug must cost one connection, never the daemon
            log.exception("[%s] internal error handling a command, closing", self.remote_address)
            self.close()
        self._lane_done(held)
        return True

    def _fin_read(self, data: bytes) -> bool:
        """If ``data`` is one ``FIN <id>`` of a message in flight to this client (a work queue's
        worker), do what :meth:`_process` does for it without the parser's buffer or the command
        loop: finish it (:func:`~nsq.server.nsqd.tcp.commands.fin`), refill RDY, write at once.
        False (nothing done): ``data`` is for the usual path."""
        if (self._waiting is not None or self.closed or self._retry is not None or data[20] != 10
                or not data.startswith(b"FIN ") or not self.parser.drained):
            return False
        held = self._output.hold()
        try:
            fin(self, (v2.CMD_FIN, data[4:20]))
        except ClientError as exc:
            self.client_error(exc)  # E_FIN_FAILED, not fatal: as from the command loop
        if self.freed:
            self._refill()
        self._lane_done(held)
        return True

    def _refill(self) -> None:
        """FIN/REQ freed RDY slots (:attr:`freed`): refill them in one
        batch per read, not one pump per FIN."""
        self.freed = False
        if self.channel is not None and self.in_flight_count < self.ready_count and not self.closed:
            self.channel.client_ready(self)

    def _lane_done(self, held: bool) -> None:
        """The end of a lane's read: a --sync-every=1 fsync the command owes is waited for (as in
        :meth:`_process`), then what it made is written (:meth:`Output.flush_now`)."""
        if self._owed:
            barrier = self.nsqd.durability_barrier()
            if barrier is not None:
                self._wait_for(barrier)
        self._output.flush_now(self, held)

    def pause_writing(self) -> None:
        """The peer does not read fast enough (transport above its high-water
        mark): stop reading its commands and stop sending it messages."""
        self.write_paused = True
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()
        if self.channel is not None:
            self.channel.client_ready(self)  # drops it from the ready set

    def resume_writing(self) -> None:
        """The transport drained below its low-water mark: go on."""
        self.write_paused = False
        if self.closed:
            return
        self._loop.call_soon(self._go_on)  # commands held meanwhile, input still compressed
        self._resume_reading()
        self._ready_again()

    def _ready_again(self) -> None:
        if self.channel is not None and self.in_flight_count < self.ready_count and not self.closed:
            self.channel.client_ready(self)

    def _resume_reading(self) -> None:
        if (self.transport is not None and self._waiting is None and not self.write_paused
                and not self._more_input and not self.closed):
            self.transport.resume_reading()

    def _wait_for(self, barrier: asyncio.Future[Any]) -> None:
        # reading goes on until more bytes come (data_received pauses it then): a stop and a
        # start of reading are two epoll_ctl calls per PUB for a client that waits for each OK
        self._waiting = barrier
        if self.transport is not None and (self.parser.buffered or (self.codec is not None and self.codec.pending)):
            self.transport.pause_reading()
        barrier.add_done_callback(self._barrier_done)

    def _suspend(self, wait: Suspend) -> None:
        """Stop reading and hold output until ``wait.future`` is done."""
        self._waiting = wait.future
        if self.transport is not None:
            self.transport.pause_reading()

        def done(fut: asyncio.Future[Any]) -> None:
            self._waiting = None
            if not fut.cancelled():
                fut.exception()  # retrieved here, whatever happens next
            if self.closed:
                return
            try:
                wait.on_done(fut)
            except ClientError as exc:
                self._retry = None
                self.client_error(exc)
            if self.closed:
                return
            self._resume_reading()
            self._mark_dirty()
            self._go_on()

        wait.future.add_done_callback(done)

    def _barrier_done(self, barrier: asyncio.Future[Any]) -> None:
        self._waiting = None
        if self.closed:
            return
        exc = barrier.exception() if not barrier.cancelled() else None
        if isinstance(exc, NotReplicated):  # --replica-acks: not on enough replicas
            self.out = bytearray()
            self.client_error(ClientError(E_PUB_FAILED, f"PUB failed {exc}"))
            return
        if exc is not None:
            # the write is not known to be on disk: do not answer OK
            self.nsqd.set_health(f"failed to sync - {exc}")
            self.out = bytearray()
            self.client_error(ClientError(E_PUB_FAILED, "PUB failed sync to disk failed"))
            return
        self._resume_reading()
        self._mark_dirty()
        self._go_on()

    def _go_on(self) -> None:
        """After a wait: run the commands buffered meanwhile, then inflate
        what the codec still holds."""
        if self.closed or self._waiting is not None or self.write_paused:
            return
        try:
            if self.codec is not None and self.codec.pending:
                self._decode(b"")
                if not self._more_input:
                    self._resume_reading()
            else:
                self._more_input = False
                self._process()
        except Exception:
            log.exception("[%s] internal error reading from the client, closing", self.remote_address)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self.closed = True
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        if self.channel is not None:
            self.channel.remove_client(self)
        self.nsqd.remove_client(self)
        # what a closed client still holds goes now, even if something (an
        # in-flight message until its timeout) keeps the object alive
        self.out = bytearray()
        self.parser.clear()
        self.codec = None
        self._retry = None
        # no reference cycle left (transport <-> protocol): the object goes
        # by reference counting, not at the next full GC
        self.transport = None
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.remote_address)

    # -- output ----------------------------------------------------------------

    def _mark_dirty(self) -> None:
        if not self.dirty and self.out:
            self.dirty = True
            self._output.schedule(self)

    def flush(self) -> None:
        """Write the output buffer to the socket (called by the daemon).

        Held back while a --sync-every=1 fsync this client waits for runs.
        """
        self.dirty = False
        if self._waiting is not None:
            return
        if self.out_full:
            self.out_full = False
            if not self.write_paused and not self.closed:
                # a refill once this write is done (none if the transport
                # pauses us: resume_writing refills then)
                self._loop.call_soon(self._ready_again)
        if self.out and not self.closed and self.transport is not None:
            if self.codec is not None:
                self.transport.write(self.codec.encode(self.out))
            else:
                self.transport.write(self.out)
            self.out = bytearray()
        if self._more_input and not self.write_paused and not self.closed:
            self._loop.call_soon(self._go_on)

    def write_now(self) -> None:
        """Write the output buffer now, through the codec as it is (an
        upgrade's answer goes out before the stream changes)."""
        if self.out and self.transport is not None:
            self.transport.write(self.codec.encode(self.out) if self.codec is not None else self.out)
            self.out = bytearray()

    #: message bytes one loop turn writes to a client (bytes): past it the
    #: client takes no more until its output is written
    OUT_BUDGET = TURN_BYTES

    def send_messages(self, msgs: list[Message]) -> int:
        """Append message frames for ``msgs`` (already marked in flight)
        while the output holds less than :attr:`OUT_BUDGET` bytes (one
        message may pass it); returns how many were appended. Once it is
        reached, :attr:`out_full` holds further deliveries until
        :meth:`flush` has written them."""
        out = self.out
        pack = _MSG_FRAME_HDR.pack
        room = self.OUT_BUDGET - len(out)
        n = len(msgs)
        if (len(msgs[0][1]) if n == 1 else sum(map(len, map(_BODY, msgs)))) + 30 * n < room:  # all fit: no check per message
            for msg_id, body, ts, attempts, _, _, _, _ in msgs:
                out += pack(len(body) + 30, 2, ts, attempts)
                out += msg_id
                out += body
        else:
            n = 0
            for msg_id, body, ts, attempts, _, _, _, _ in msgs:
                if room <= 0:
                    break
                size = len(body) + 30
                room -= size
                out += pack(size, 2, ts, attempts)
                out += msg_id
                out += body
                n += 1
            self.out_full = room <= 0
        self.in_flight_count += n
        self.message_count += n
        if not self.dirty:
            self.dirty = True
            self._output.schedule(self)
        return n

    def client_error(self, exc: ClientError) -> None:
        """Log ``exc``, answer its error frame (if it has one) and close the
        connection if it is fatal (Go protocol_v2.go ``IOLoop``)."""
        log.error("[%s] - %s", self.remote_address, exc.wire_text())
        if exc.answer:
            self.out += encode_frame(FRAME_TYPE_ERROR, exc.wire_bytes())
        if exc.fatal:
            self.close()

    def close(self) -> None:
        """Flush what is buffered and close the connection."""
        if self.closed:
            return
        self.closed = True
        if self._waiting is not None:
            self.out = bytearray()  # never answer OK for a write not yet fsynced
        if self.transport is not None:
            if self.out:
                self.transport.write(self.codec.encode(self.out) if self.codec is not None else self.out)
                self.out = bytearray()
            self.transport.close()

    # -- heartbeats --------------------------------------------------------------

    def schedule_heartbeat(self) -> None:
        """(Re)start the heartbeat timer at the negotiated interval (none at 0)."""
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        interval = self.negotiated.heartbeat_interval
        if interval > 0 and not self.closed:
            self._heartbeat_handle = self._loop.call_later(interval, self._heartbeat)

    def _heartbeat(self) -> None:
        self._heartbeat_handle = None
        if self.closed:
            return
        idle = self._loop.time() - self.last_recv
        if idle >= 2 * self.negotiated.heartbeat_interval * 0.999:
            log.error("[%s] - heartbeat timeout: no command in %.1fs, closing", self.remote_address, idle)
            self.close()
            return
        self.out += _HEARTBEAT_FRAME
        self._mark_dirty()
        self.schedule_heartbeat()

    # -- channel callbacks -------------------------------------------------------

    def message_done(self) -> None:
        """A message of this client was finished or requeued."""
        self.in_flight_count -= 1
        self.freed = True

    def timed_out_message(self) -> None:
        """An in-flight message of this client timed out."""
        self.in_flight_count -= 1
        if self.channel is not None and not self.closed and self.in_flight_count < self.ready_count:
            self.channel.client_ready(self)
