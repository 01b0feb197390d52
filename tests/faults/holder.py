"""A consumer that holds every message it gets and never answers (no FIN,
no REQ), printing each body on a line as it arrives. Run in a host of its
own by the consumer-partition test:

    python tests/faults/holder.py --topic T --channel C --nsqd ADDR ... \\
        [--max-in-flight 15] [--heartbeat-ms 1000] [--msg-timeout-ms 5000]

Our Consumer with ``Message.disable_auto_response``; IDENTIFY asks for the
heartbeat interval and message timeout given, and ``client_id`` "holder"
(so nsqd's /stats shows which clients are its).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys


async def main() -> None:
    from nsq.client import Consumer

    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--nsqd", action="append", required=True)
    parser.add_argument("--max-in-flight", type=int, default=15)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--msg-timeout-ms", type=int, default=5000)
    args = parser.parse_args()
    out = sys.stdout.buffer

    def hold(msg) -> None:
        msg.disable_auto_response()
        out.write(msg.body + b"\n")
        out.flush()

    identify = {"client_id": "holder", "heartbeat_interval": args.heartbeat_ms, "msg_timeout": args.msg_timeout_ms}
    consumer = Consumer(args.topic, args.channel, hold, args.nsqd, max_in_flight=args.max_in_flight,
                        identify=identify, reconnect_max_delay=2.0, connect_timeout=2.0)
    await consumer.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
