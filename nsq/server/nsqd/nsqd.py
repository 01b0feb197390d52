"""The nsqd daemon as a library: ``NSQD(options)``, ``await start()``, ``await stop()``.

An embedded nsqd runs inside any asyncio program (tests, the quick start,
the Spark tests). ``nsq nsqd`` is a thin wrapper around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from nsq.protocol.v2 import Limits
from nsq._internal.addresses import fmt_addr as _fmt_addr
from nsq._internal.addresses import split_host_port
from nsq._internal.neterrors import listen_errors
from nsq.server.nsqd.storage.backend import BackendQueue
from nsq.server.nsqd.storage.datapath import DataPath
from nsq.server.nsqd.drain import DrainController
from nsq.server.nsqd.delivery.replicastore import log_store
from nsq.server.nsqd.delivery.queuestore import QueueTopicStore
from nsq.server.nsqd.delivery.deadletter import ChannelSettings
from nsq.server.nsqd.lookup import Lookupds
from nsq.server.nsqd.metadata import MetadataStore
from nsq.server.nsqd.options import ConfigError, NSQDOptions, validate
from nsq.server.nsqd.replication import Replication
from nsq.server.nsqd.tcp.output import Output
from nsq.server.nsqd.delivery.topic import Topic
from nsq.server.spin import Spinner

if TYPE_CHECKING:
    import aiohttp

    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.tcp.client_v2 import ClientV2
    from nsq.server.nsqd.storage.deferredlog import DeferredLog
    from nsq.server.nsqd.http.api import NSQDHTTPServer
    from nsq.server.nsqd.stats.statsd import StatsdPusher
    from nsq.server.nsqd.delivery.stores import TopicStore

__all__ = ["NSQD", "split_host_port"]

log = logging.getLogger("nsq.nsqd")

#: seconds between scans of in-flight and deferred timeouts
SCAN_INTERVAL = 0.1


class NSQD:
    """The nsqd daemon.

    Args:
        options: :class:`NSQDOptions`; defaults are Go nsqd v1.2's.

    Attributes:
        topics: by name.
        clients: connected V2 clients by id.
        tcp_port, http_port: bound ports (after :meth:`start`; useful with
            port 0).
        start_time: Unix seconds when started.
    """

    def __init__(self, options: NSQDOptions | None = None) -> None:
        self.options = options or NSQDOptions()
        opts = self.options
        if not 0 <= opts.node_id < 1024:
            raise ValueError(f"--node-id must be in [0,1024), got {opts.node_id}")
        self.limits = Limits(
            max_msg_size=opts.max_msg_size,
            max_body_size=opts.max_body_size,
            max_rdy_count=opts.max_rdy_count,
            max_req_timeout_ms=int(opts.max_req_timeout * 1000),
        )
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, ClientV2] = {}
        self._next_client_id = 0
        #: V2 connections' output, written once per loop turn or after a small read
        self.output = Output()
        #: --spin-before-sleep: keeps the loop polling after each read (None: off)
        self.spinner: Spinner | None = None
        #: --spin-after-lone-pub (without --spin-before-sleep): polls after a lone producer's PUB (None: off)
        self.pub_spinner: Spinner | None = None
        #: channels with in-flight or deferred deadlines (the scan visits only these)
        self._armed: set[Channel] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tcp_server: asyncio.base_events.Server | None = None
        self._http: NSQDHTTPServer | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self._stopped: asyncio.Event | None = None
        self.tcp_host = ""
        self.tcp_port = 0
        self.http_host = ""
        self.http_port = 0
        self.https_host = ""
        self.https_port = 0
        #: server SSLContext for the tls_v1 upgrade and HTTPS (None: TLS off)
        self.tls_context: ssl.SSLContext | None = None
        #: effective --tls-required: "false", "true" or "tcp-https"
        self.tls_required = "false"
        self.start_time = int(time.time())
        self.exiting = False
        #: True from the start of a drain (:meth:`drain`) until exit
        self.draining = False
        #: drains before a shutdown (:meth:`drain`, :meth:`request_drain`)
        self.drainer = DrainController(self)
        self.health = "OK"
        #: where disk queues and nsqd.dat live; "" = memory only
        self.data_path = self.options.data_path
        #: the data path's lock, disk queues, disk thread, exit reserve
        self.disk = DataPath(self.data_path, self.options, self.set_health, lambda: self.health == "OK")
        #: nsqd.dat: loaded at start, rewritten as topics and channels change
        self.metadata = MetadataStore(self)
        #: per-channel overrides (max_attempts), beside nsqd.dat
        self.settings = ChannelSettings(self.data_path)
        #: connections to the nsqlookupds (--lookupd-tcp-address)
        self.lookupds = Lookupds(self)
        #: the leader's HTTP address while a replica ("": a leader)
        self.replica_of = self.options.replica_of
        #: role, epoch, replicas (nsq/server/nsqd/replication)
        self.replication = Replication(self)
        self._auth_session: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[None]] = set()
        #: the --statsd-address push (None when off)
        self.statsd: StatsdPusher | None = None
        self._gc_pauses_held = False

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Bind the TCP and HTTP listeners and start the timeout scanner.

        Raises:
            nsq._internal.neterrors.ListenError: (an OSError) an address
                that is malformed or cannot be bound, before anything is
                written to the data path.
            OSError: the data path cannot be locked or read.
            ConfigError: a bad statsd / e2e option (a ValueError).
        """
        from nsq.server.nsqd.tcp.client_v2 import ClientV2
        from nsq.server.nsqd.http.api import NSQDHTTPServer
        from nsq.server.nsqd.stats.memstats import GC_PAUSES

        try:
            validate(self.options)
        except ConfigError:
            self.exiting = True  # nothing started yet: stop() has nothing to undo
            raise
        GC_PAUSES.acquire()
        self._gc_pauses_held = True
        self._loop = asyncio.get_running_loop()
        self.output.loop = self._loop
        if self.options.spin_before_sleep > 0:
            self.spinner = Spinner(self._loop, self.options.spin_before_sleep)
        elif self.options.spin_after_lone_pub > 0:
            self.pub_spinner = Spinner(self._loop, self.options.spin_after_lone_pub, peers=1)
        self._stopped = asyncio.Event()
        self.start_time = int(time.time())
        self._setup_tls()

        def factory() -> ClientV2:
            self._next_client_id += 1
            return ClientV2(self, self._next_client_id)

        # listen first, answer later (Go's New() listens before main loads
        # the metadata): an address that cannot be bound fails the start
        # before anything is written to the data path
        with listen_errors("TCP", self.options.tcp_address):
            host, port = split_host_port(self.options.tcp_address)
            self._tcp_server = await self._loop.create_server(
                factory, host or None, port, reuse_address=True, backlog=1024, start_serving=False
            )
        sockname = self._tcp_server.sockets[0].getsockname()
        self.tcp_host, self.tcp_port = sockname[0], sockname[1]
        reserve = os.path.join(self.data_path, self.disk.RESERVE_FILE) if self.data_path else ""
        made_reserve = bool(reserve) and not os.path.exists(reserve)
        http = self._http = NSQDHTTPServer(self)
        self.replication.add_routes(http.app)
        try:
            self.http_host, self.http_port = await http.bind(self.options.http_address)
            self._not_own_replica()
            if self.tls_context is not None and self.options.https_address:
                self.https_host, self.https_port = await http.bind(self.options.https_address, self.tls_context)
            if self.data_path:
                self.disk.open()
                self.replication.load()
                self.metadata.load()
                self.metadata.loaded = True
        except BaseException:
            self._tcp_server.close()
            await http.stop()
            self.disk.unlock()
            if made_reserve:
                with contextlib.suppress(OSError):
                    os.remove(reserve)
            raise
        await self._tcp_server.start_serving()
        await http.serve()
        log.info("TCP: listening on %s", _fmt_addr(self.tcp_host, self.tcp_port))
        log.info("HTTP: listening on %s", _fmt_addr(self.http_host, self.http_port))
        if self.https_port:
            log.info("HTTPS: listening on %s", _fmt_addr(self.https_host, self.https_port))
        # as Go: unset broadcast ports become the bound ones (/config shows them)
        if not self.options.broadcast_tcp_port:
            self.options.broadcast_tcp_port = self.tcp_port
        if not self.options.broadcast_http_port:
            self.options.broadcast_http_port = self.http_port
        self._scan_task = self._loop.create_task(self._scan_loop())
        if self.options.nsqlookupd_tcp_addresses and not self.replica_of:  # a replica registers once promoted
            self.lookupds.set_addresses(self.options.nsqlookupd_tcp_addresses)
        self.replication.start()
        from nsq.server.nsqd.stats.statsd import StatsdPusher, resolve_prefix

        # as Go's New(): the prefix's %s becomes this nsqd's host key
        self.options.statsd_prefix = resolve_prefix(self.options.statsd_prefix, self.options.broadcast_address,
                                                    self.options.broadcast_http_port)
        if self.options.statsd_address:
            self.statsd = StatsdPusher(self)
            self.statsd.start()

    def replication_status(self) -> dict[str, Any] | None:
        """:meth:`Replication.status` (``/stats``' ``replication``)."""
        return self.replication.status()

    def _not_own_replica(self) -> None:
        """Refuse ``--replica-of`` naming this nsqd's own HTTP address.

        Raises:
            ConfigError: it does.
        """
        if self.replica_of:
            host, port = split_host_port(self.replica_of)
            if port == self.http_port and host in ("", self.http_host, "localhost", "127.0.0.1", "0.0.0.0",
                                                  self.options.broadcast_address):
                raise ConfigError(f"--replica-of={self.replica_of} is this nsqd itself")

    def auth_session(self) -> aiohttp.ClientSession:
        """The aiohttp session AUTH queries use (``--http-client-*-timeout``)."""
        if self._auth_session is None:
            import aiohttp

            from nsq import __version__

            timeout = aiohttp.ClientTimeout(total=self.options.http_client_request_timeout,
                                            connect=self.options.http_client_connect_timeout)
            self._auth_session = aiohttp.ClientSession(timeout=timeout,
                                                       headers={"User-Agent": f"nsqd/{__version__}"})
        return self._auth_session

    def _setup_tls(self) -> None:
        """Build the TLS context from the --tls-* options (Go's New() rules).

        Raises:
            ValueError: a TLS option that cannot work.
        """
        from nsq.server.tls import build_server_context

        opts = self.options
        required = str(opts.tls_required).lower()
        if opts.tls_client_auth_policy and required == "false":
            required = "true"
        self.tls_context = build_server_context(opts.tls_cert, opts.tls_key, opts.tls_client_auth_policy,
                                                opts.tls_root_ca_file, opts.tls_min_version)
        if self.tls_context is None and required != "false":
            raise ValueError("cannot require TLS client connections without TLS key and cert")
        self.tls_required = required

    async def stop(self) -> None:
        """Stop accepting, close every client cleanly and shut down."""
        if self.exiting:
            if self._stopped is not None:
                await self._stopped.wait()
            return
        self.exiting = True
        log.info("NSQ: closing")
        await self.replication.stop()
        await self.lookupds.close()
        if self.statsd is not None:
            await self.statsd.stop()
        if self._gc_pauses_held:
            from nsq.server.nsqd.stats.memstats import GC_PAUSES

            GC_PAUSES.release()
            self._gc_pauses_held = False
        if self.spinner is not None:
            self.spinner.close()
        if self.pub_spinner is not None:
            self.pub_spinner.close()
        current = asyncio.current_task()
        for task in list(self._background):
            if task is not current:
                task.cancel()
        await self.lookupds.close_http()
        if self._auth_session is not None:
            await self._auth_session.close()
            self._auth_session = None
        if self._tcp_server is not None:
            self._tcp_server.close()
        self.output.flush_all()
        for client in list(self.clients.values()):
            client.close()
        self.persist_metadata()
        for topic in list(self.topics.values()):
            try:
                topic.close(delete=False)
            except Exception:
                log.exception("TOPIC(%s): failed to close cleanly", topic.name)
        if self.metadata.failed and self.disk.release_reserve():
            self.persist_metadata()
        self.disk.close()
        if self._scan_task is not None:
            self._scan_task.cancel()
            try:
                await self._scan_task
            except asyncio.CancelledError:
                pass
        if self._http is not None:
            await self._http.stop()
        if self._tcp_server is not None:
            try:
                await asyncio.wait_for(self._tcp_server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
        log.info("NSQ: bye")
        if self._stopped is not None:
            self._stopped.set()

    async def wait_stopped(self) -> None:
        """Wait until :meth:`stop` has finished."""
        assert self._stopped is not None
        await self._stopped.wait()

    @property
    def tcp_address(self) -> str:
        """``host:port`` the TCP listener is bound to."""
        return _fmt_addr(self.tcp_host, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` the HTTP listener is bound to."""
        return _fmt_addr(self.http_host, self.http_port)

    # -- topics ------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        """The topic ``name``, created if new. The name must be valid."""
        topic = self.topics.get(name)
        if topic is None:
            ephemeral = name.endswith("#ephemeral")
            # the storage engine is chosen here, once: the topic's store
            # makes its channels' (nsq/server/nsqd/delivery/stores.py)
            topic_log = self.disk.make_topic_log(name, ephemeral)
            store: TopicStore = (log_store(self, name, topic_log) if topic_log is not None
                                 else QueueTopicStore(self, self.make_backend(name, ephemeral)))
            if topic_log is not None:
                self.replication.attach(topic_log)
            topic = Topic(self, name, store)
            self.topics[name] = topic
            log.info("TOPIC(%s): created", name)
            if not topic.ephemeral:
                self.persist_metadata_soon()
            if not self.metadata.loading:
                self.lookupds.precreate_channels(topic)
            self.lookupds.register(name)
        return topic

    def get_existing_topic(self, name: str) -> Topic | None:
        """The topic ``name`` or None."""
        return self.topics.get(name)

    def delete_topic(self, name: str) -> bool:
        """Delete a topic, its channels and their messages; False if unknown."""
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        log.info("TOPIC(%s): deleting", name)
        topic_log = getattr(topic.store, "log", None)
        if topic_log is not None and not topic.ephemeral:
            self.replication.detach(topic_log)
        topic.close(delete=True)
        self.lookupds.unregister(name)
        if not topic.ephemeral:
            self.persist_metadata_soon()
        return True

    def make_backend(self, name: str, ephemeral: bool) -> BackendQueue:
        """The overflow backend for a topic or channel (:meth:`DataPath.make_backend`)."""
        return self.disk.make_backend(name, ephemeral)

    def make_deferred_log(self, name: str, ephemeral: bool) -> DeferredLog | None:
        """The deferred log of a durable channel, or None (:meth:`DataPath.make_deferred_log`)."""
        return self.disk.make_deferred_log(name, ephemeral)

    def durability_barrier(self) -> asyncio.Future[Any] | None:
        """The fsyncs owed before answering OK (:meth:`DataPath.durability_barrier`)."""
        return self.disk.durability_barrier()

    def forget_backend(self, backend: Any) -> None:
        """Stop syncing a backend that was closed or deleted."""
        self.disk.forget_backend(backend)

    def write_at_exit(self, backend: BackendQueue, records: list[bytes], subject: str) -> int:
        """Write messages held in memory at exit (:meth:`DataPath.write_at_exit`);
        how many were written."""
        return self.disk.write_at_exit(backend, records, subject)

    def notify_channel_created(self, topic: Topic, channel: Channel) -> None:
        """A channel appeared: persist metadata, REGISTER it with the lookupds."""
        if not channel.ephemeral:
            self.persist_metadata_soon()
        self.lookupds.register(topic.name, channel.name)

    def channel_settings(self, topic: str, channel: str) -> dict[str, Any]:
        """A channel's own settings ({} for the daemon's defaults)."""
        return self.settings.get(topic, channel)

    def notify_channel_deleted(self, topic: Topic, channel: Channel) -> None:
        """A channel went away: persist metadata, UNREGISTER it, drop its settings."""
        self.settings.forget(topic.name, channel.name)
        if not channel.ephemeral:
            self.persist_metadata_soon()
        self.lookupds.unregister(topic.name, channel.name)

    # -- lookupd -----------------------------------------------------------------

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """Replace the lookupd TCP addresses (``PUT /config/nsqlookupd_tcp_addresses``)."""
        self.options.nsqlookupd_tcp_addresses = list(addresses)
        if self._loop is not None and not self.exiting:
            self.lookupds.set_addresses(addresses)

    # -- metadata and health -----------------------------------------------------

    def persist_metadata_soon(self) -> None:
        """Write ``nsqd.dat`` soon, once for many changes (:meth:`MetadataStore.persist_soon`)."""
        self.replication.changed()
        self.metadata.persist_soon()

    def persist_metadata(self) -> None:
        """Write ``nsqd.dat`` now (:meth:`MetadataStore.persist`)."""
        self.replication.changed()
        self.metadata.persist()

    def set_health(self, error: str | None) -> None:
        """Record an error (``/ping`` answers ``NOK - error``) or None for OK."""
        if error is None:
            self.health = "OK"
        else:
            if self.health == "OK":
                log.error("NSQ: unhealthy: %s", error)
            self.health = error

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the next loop turn (or now without a loop)."""
        if self._loop is not None and not self.exiting:
            self._loop.call_soon(callback)

    def call_later(self, delay: float, callback: Callable[[], Any]) -> None:
        """Run ``callback`` after ``delay`` s (nothing once exiting)."""
        if self._loop is not None and not self.exiting:
            self._loop.call_later(delay, callback)

    # -- clients -----------------------------------------------------------------

    def add_client(self, client: ClientV2) -> None:
        """Track a connected V2 client (for /stats producers and shutdown)."""
        self.clients[client.id] = client

    def remove_client(self, client: ClientV2) -> None:
        """Forget a disconnected client."""
        self.clients.pop(client.id, None)

    def arm_timers(self, channel: Channel) -> None:
        """Have the timeout scan (every 100 ms) visit ``channel`` until it has
        no in-flight or deferred deadline left; idle channels cost nothing."""
        channel.armed = True
        self._armed.add(channel)

    # -- timers ------------------------------------------------------------------

    async def _scan_loop(self) -> None:
        next_sync = time.monotonic() + self.options.sync_timeout
        while True:
            await asyncio.sleep(SCAN_INTERVAL)
            now = time.monotonic()
            for channel in list(self._armed):
                try:
                    if channel.has_timers and not channel.deleted:
                        channel.process_timeouts(now)
                except Exception:  # never let one bad channel stop the scanner
                    log.exception("queue scan failed")
                if not channel.has_timers or channel.deleted:
                    channel.armed = False
                    self._armed.discard(channel)
            if now >= next_sync:
                next_sync = now + self.options.sync_timeout
                self.disk.sync_queues()
                if self.disk.wal:
                    self.checkpoint_logs()
                if self.metadata.failed:
                    self.persist_metadata()
                if self.health != "OK" and self.data_path:
                    self.disk.probe()

    def checkpoint_logs(self) -> None:
        """``--storage=wal``: fold each channel's FINs, write the checkpoints
        that changed (in the disk thread), then delete the log segments no
        restart could need (every ``--sync-timeout``)."""
        batches = []
        files: list[tuple[str, bytes]] = []
        for topic in list(self.topics.values()):
            topic_files, what = topic.checkpoints()
            batches.append((topic, what, len(topic_files)))
            files += topic_files

        def done(ok: list[bool]) -> None:
            i = 0
            for topic, what, n in batches:
                topic.checkpoints_written(what, ok[i:i + n])
                i += n

        if files:
            self.disk.write_files(files, done)
        else:
            done([])

    # -- drain (beyond Go nsqd; nsq/server/nsqd/drain.py) ------------------------

    def in_flight_count(self) -> int:
        """Messages in flight over every channel."""
        return self.drainer.in_flight_count()

    async def drain(self, timeout: float) -> bool:
        """Drain before a shutdown (beyond Go nsqd): unregister from every
        lookupd (consumers and ``nsq pub`` stop finding this nsqd), stop
        accepting TCP (V2) connections, refuse publishes (``E_PUB_FAILED
        PUB failed draining``, HTTP 503 ``DRAINING``), deliver nothing new,
        and wait until every message in flight is finished or requeued, at
        most ``timeout`` s (:meth:`skip_drain` ends the wait). The HTTP
        listener stays open so health checks see ``/ping`` answer 503
        ``DRAINING`` (and ``/stats`` shows the drain). Call :meth:`stop`
        after it: what is still in flight is persisted as usual.

        Returns:
            True if nothing was left in flight.
        """
        return await self.drainer.drain(timeout)

    def skip_drain(self) -> None:
        """End a drain's wait now (a second SIGTERM)."""
        self.drainer.skip()

    def request_drain(self) -> None:
        """``POST /drain``: drain (``--drain-timeout``) and stop, in the
        background; :meth:`wait_stopped` returns once it is done."""
        self.drainer.request()

    def stop_accepting(self) -> None:
        """Close the TCP listener: no new V2 connections (the open ones and
        the HTTP listener stay)."""
        if self._tcp_server is not None:
            self._tcp_server.close()

    def run_in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of this daemon (:meth:`stop` cancels what
        is still running, except the task that calls it)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- helpers -----------------------------------------------------------------

    @staticmethod
    def hostname() -> str:
        """The OS hostname (``/info`` ``hostname``)."""
        return socket.gethostname()

