"""Drive the official Python client, pynsq, against an nsqd.

Run by the pynsq virtualenv's interpreter (see ``pynsq_env.py``), never by the
test process: ``import nsq`` here must be pynsq, not this project. Nothing
from the project is imported.

Every line on stdout is one JSON object with a ``"event"`` key; diagnostics go
to stderr. Exit status: 0 success, 2 timeout, 3 a publish failed, 4 wrong
``nsq`` module, 5 unexpected data, 6 a connection error.

Modes::

    writer --nsqd-tcp H:P --topic T --count N [--mpub-batch B] [--idle S] [--pad P]
        Publish bodies ``<prefix>0`` .. ``<prefix>N-1`` (``--pad``: longer
        ones, see :func:`make_body`): the first half with
        PUB, the rest with MPUB in batches of B. Waits for every callback.
        ``--idle S`` keeps the connection idle S seconds before publishing
        (with ``--heartbeat-interval`` to exercise heartbeats). Prints
        {"event": "done", "published": N}.

    reader --nsqd-tcp H:P --topic T --channel C --count N [--max-in-flight M]
           [--requeue-first] [--requeue-delay S] [--wait-stdin]
        Consume until N distinct bodies have been finished. Every delivery is
        printed as {"event": "message", "body", "id", "attempts", "ts", "t"}.
        ``--requeue-first``: the handler answers False (requeue) to every
        message's first attempt and True afterwards. Prints
        {"event": "done", "distinct", "deliveries"}.

    Both modes: ``--wait-stdin`` keeps the connection open after "done" until
    a line (or EOF) arrives on stdin, so the test can read client stats;
    every IDENTIFY response is printed as {"event": "identify", "data"},
    every AUTH response as {"event": "auth", "data"} and every heartbeat as
    {"event": "heartbeat"}.

    Negotiated features (both modes), passed to pynsq's Reader/Writer::

        --snappy                 snappy=True (python-snappy in the virtualenv)
        --deflate                deflate=True
        --tls                    tls_v1=True (tls_options: the system CAs)
        --tls-ca FILE            tls_v1=True, tls_options={"ca_certs": FILE}
        --tls-cert F --tls-key K tls_options certfile/keyfile (a client certificate)
        --auth-secret S          auth_secret=S

    pynsq's snappy and deflate sockets are patched to raise BlockingIOError
    where they mean "would block" (see :func:`fix_would_block`; a pynsq 0.9.1
    bug under tornado >= 5), unless ``--no-fix-would-block``.

    An error pynsq reports on a connection (an error frame such as
    E_UNAUTHORIZED, a failed TLS upgrade) is printed as
    {"event": "error", "error": TEXT} and ends the run with status 6 (3 when
    it failed a publish).
"""

import argparse
import hashlib
import json
import os
import sys
import threading
import time


def emit(**obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def log(msg):
    sys.stderr.write("pynsq_script: %s\n" % msg)
    sys.stderr.flush()


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("writer", "reader"))
    p.add_argument("--nsqd-tcp", default=None)
    p.add_argument("--lookupd-http", action="append", default=[],
                   help="reader: discover nsqds through this lookupd (repeatable)")
    p.add_argument("--lookupd-poll", type=int, default=60)
    p.add_argument("--topic", required=True)
    p.add_argument("--channel", default="pynsq")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--prefix", default="msg-")
    p.add_argument("--pad", type=int, default=0,
                   help="writer: append PAD bytes of hex digits to every body (see make_body)")
    p.add_argument("--mpub-batch", type=int, default=10)
    p.add_argument("--max-in-flight", type=int, default=10)
    p.add_argument("--requeue-first", action="store_true")
    p.add_argument("--requeue-delay", type=int, default=0)
    p.add_argument("--heartbeat-interval", type=int, default=30)
    p.add_argument("--idle", type=float, default=0.0)
    p.add_argument("--deflate", action="store_true")
    p.add_argument("--snappy", action="store_true")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--tls-ca", default=None)
    p.add_argument("--tls-cert", default=None)
    p.add_argument("--tls-key", default=None)
    p.add_argument("--auth-secret", default=None)
    p.add_argument("--no-fix-would-block", action="store_true",
                   help="leave pynsq's snappy/deflate sockets unpatched (see fix_would_block)")
    p.add_argument("--wait-stdin", action="store_true")
    p.add_argument("--timeout", type=float, default=30.0)
    return p.parse_args(argv)


def make_body(prefix, i, pad=0):
    """Body ``i`` of a writer run: ``<prefix><i>``, then with ``pad`` > 0 a
    dash and ``pad`` hex digits (hashes: compressible, but not trivially)."""
    body = "%s%d" % (prefix, i)
    if pad > 0:
        digits = "".join(hashlib.sha256(("%d-%d" % (i, j)).encode()).hexdigest() for j in range(pad // 64 + 1))
        body += "-" + digits[:pad]
    return body


def error_text(error):
    """pynsq's Error carries the error frame's bytes; SendError has its own str()."""
    if type(error).__name__ == "Error" and error.args and isinstance(error.args[0], bytes):
        return error.args[0].decode("utf-8", "replace")
    return str(error)


def fix_would_block():
    """Work around a pynsq 0.9.1 bug under tornado >= 5 (a client bug, whatever the server).

    pynsq's SnappySocket and DeflateSocket (nsq/snappy_socket.py,
    nsq/deflate_socket.py) signal "nothing decompressed yet" with
    ``socket.error(errno.EWOULDBLOCK)``: on Python 3 that is a plain
    ``OSError`` whose ``errno`` is None, while tornado >= 5's
    ``IOStream.read_from_fd`` only treats ``BlockingIOError`` as "would
    block". So whenever one recv() holds only part of a compressed chunk and
    nothing else, tornado logs "error on read: 11" and pynsq drops the
    connection ("failed to unpack size"). Any server can cause that (TCP may
    split a chunk anywhere); it is most likely with large chunks written at
    once (see test_pynsq.py's test_snappy_reader_unpatched_pynsq). Raising
    ``BlockingIOError`` instead (what the code means) is the whole fix;
    ``--no-fix-would-block`` runs pynsq unpatched.
    """
    import types
    import nsq.deflate_socket
    try:
        import nsq.snappy_socket
        modules = (nsq.deflate_socket, nsq.snappy_socket)
    except ImportError:  # no python-snappy
        modules = (nsq.deflate_socket,)
    for module in modules:
        # the modules use their `socket` global only for socket.error(EWOULDBLOCK)
        module.socket = types.SimpleNamespace(error=BlockingIOError)


def connection_kwargs(args):
    kwargs = dict(heartbeat_interval=args.heartbeat_interval, deflate=args.deflate, snappy=args.snappy)
    if args.tls or args.tls_ca or args.tls_cert:
        tls_options = {}
        if args.tls_ca:
            tls_options["ca_certs"] = args.tls_ca
        if args.tls_cert:
            tls_options["certfile"] = args.tls_cert
            tls_options["keyfile"] = args.tls_key
        kwargs.update(tls_v1=True, tls_options=tls_options)
    if args.auth_secret:
        kwargs["auth_secret"] = args.auth_secret
    return kwargs


def main(argv):
    args = parse_args(argv)

    import logging
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import nsq  # pynsq
    import tornado
    import tornado.ioloop

    if not hasattr(nsq, "Reader") or not hasattr(nsq, "Writer"):
        log("imported the wrong nsq module: %s" % getattr(nsq, "__file__", "?"))
        return 4
    emit(event="start", pynsq=nsq.__version__, tornado=tornado.version,
         python=sys.version.split()[0], nsq_file=nsq.__file__)
    if not args.no_fix_would_block:
        fix_would_block()

    loop = tornado.ioloop.IOLoop.current()
    state = {"rc": None}

    def finish(rc):
        if state["rc"] is None:
            state["rc"] = rc
            # let pending writes (FIN, REQ) reach the socket before stopping
            loop.call_later(0.2, loop.stop)

    def on_timeout():
        log("timed out after %ss" % args.timeout)
        finish(2)

    loop.call_later(args.timeout, on_timeout)

    def complete(**summary):
        """Report success; with --wait-stdin, stay connected until stdin says so."""
        emit(event="done", **summary)
        if not args.wait_stdin:
            finish(0)
            return

        def wait_stdin():
            sys.stdin.readline()  # a line or EOF
            loop.add_callback(finish, 0)

        threading.Thread(target=wait_stdin, daemon=True).start()

    conn_kwargs = connection_kwargs(args)

    class Observed(object):
        """Reports IDENTIFY and AUTH responses, errors and heartbeats on stdout."""

        def _on_connection_identify_response(self, conn, data, **kwargs):
            emit(event="identify", data=data)
            return super(Observed, self)._on_connection_identify_response(conn, data, **kwargs)

        def _on_connection_auth_response(self, conn, data, **kwargs):
            emit(event="auth", data=data)
            return super(Observed, self)._on_connection_auth_response(conn, data, **kwargs)

        def _on_connection_error(self, conn, error, **kwargs):
            emit(event="error", error=error_text(error), type=type(error).__name__)
            try:
                # the Writer hands the error to the pending callback (status 3)
                return super(Observed, self)._on_connection_error(conn, error, **kwargs)
            finally:
                finish(6)

        def heartbeat(self, conn):
            emit(event="heartbeat", t=time.time())

    class Writer(Observed, nsq.Writer):
        pass

    class Reader(Observed, nsq.Reader):
        pass

    if args.mode == "writer":
        writer = Writer([args.nsqd_tcp], **conn_kwargs)
        bodies = [make_body(args.prefix, i, args.pad).encode() for i in range(args.count)]
        results = {"ok": 0, "err": 0, "expected": 0}

        def on_done(conn, data, n=1):
            if isinstance(data, nsq.Error):
                log("publish failed: %r" % (data,))
                results["err"] += n
                finish(3)
                return
            if data != b"OK":
                log("publish answered %r, expected b'OK'" % (data,))
                results["err"] += n
                finish(5)
                return
            results["ok"] += n
            if results["ok"] == results["expected"]:
                complete(published=results["ok"])

        def publish():
            if state["rc"] is not None:
                return
            conns = list(writer.conns.values())
            if not conns:
                loop.call_later(0.05, publish)
                return
            half = len(bodies) // 2
            results["expected"] = len(bodies)
            for body in bodies[:half]:
                writer.pub(args.topic, body, callback=on_done)
            rest = bodies[half:]
            for i in range(0, len(rest), args.mpub_batch):
                batch = rest[i:i + args.mpub_batch]
                writer.mpub(args.topic, batch,
                            callback=lambda conn, data, n=len(batch): on_done(conn, data, n))
            if not bodies:
                complete(published=0)

        def start():
            if args.idle:
                # wait until connected, then stay idle
                def wait_connected():
                    if writer.conns:
                        emit(event="connected")
                        loop.call_later(args.idle, publish)
                    else:
                        loop.call_later(0.05, wait_connected)
                wait_connected()
            else:
                publish()

        loop.add_callback(start)

    else:
        seen = {}
        done_bodies = set()

        def handler(message):
            body = message.body.decode("utf-8", "replace")
            emit(event="message", body=body, id=message.id.decode() if isinstance(message.id, bytes) else message.id,
                 attempts=message.attempts, ts=message.timestamp, t=time.time())
            seen[body] = seen.get(body, 0) + 1
            if args.requeue_first and message.attempts == 1:
                return False
            done_bodies.add(body)
            if len(done_bodies) >= args.count and state.get("done_at") is None:
                state["done_at"] = time.time()
                # after the handler returns pynsq sends FIN
                loop.add_callback(on_all_done)
            return True

        def on_all_done():
            complete(distinct=len(done_bodies), deliveries=sum(seen.values()))

        if args.lookupd_http:
            where = dict(lookupd_http_addresses=args.lookupd_http, lookupd_poll_interval=args.lookupd_poll)
        else:
            where = dict(nsqd_tcp_addresses=[args.nsqd_tcp])
        reader = Reader(  # noqa: F841 (pynsq runs it from the IOLoop)
            topic=args.topic,
            channel=args.channel,
            message_handler=handler,
            **where,
            max_in_flight=args.max_in_flight,
            requeue_delay=args.requeue_delay,
            max_backoff_duration=1,
            max_tries=0,
            **conn_kwargs
        )

    loop.start()
    rc = state["rc"] if state["rc"] is not None else 1
    emit(event="exit", rc=rc)
    return rc


if __name__ == "__main__":
    # belt and braces: this file must never see the project's package
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.abspath(os.path.dirname(__file__))]
    sys.exit(main(sys.argv[1:]))
