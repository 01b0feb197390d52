"""asyncio daemons around the sans-IO protocol core (``NSQD``)."""
