"""Text formats of the TUIs: counts, rates, durations, e2e latencies (pure)."""

from __future__ import annotations

__all__ = ["count", "duration", "go_duration", "interval", "latency", "mem_disk", "plural", "quantile_label", "rate",
           "size"]


def count(n: int) -> str:
    """``5250`` -> ``"5,250"`` (nsqadmin's thousands separators)."""
    return f"{n:,}"


def plural(n: int, word: str) -> str:
    """``(1, "channel")`` -> ``"1 channel"``, ``(5250, "message")`` -> ``"5,250 messages"``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def mem_disk(memory: int, disk: int, compact: bool = False) -> str:
    """nsqadmin's "Memory + Disk" cell: ``"4,097 + 1,098"`` (compact: ``"4,097+1,098"``)."""
    return f"{memory:,}+{disk:,}" if compact else f"{memory:,} + {disk:,}"


def rate(value: float | None) -> str:
    """Messages/s: ``"-"`` before a second poll, ``"0"``, ``"12.5"``, ``"1,234"``."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def duration(seconds: float) -> str:
    """A connection's age, as Go's truncated ``time.Duration``: ``"2m14s"``, ``"3h2m0s"``, ``"4d3h"``."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m{s}s"
    if minutes:
        return f"{minutes}m{s}s"
    return f"{s}s"


def interval(seconds: float) -> str:
    """A refresh interval: ``"0.5s"``, ``"2s"``, ``"1m0s"``."""
    return f"{seconds:g}s" if seconds < 1 else duration(seconds)


def latency(ns: float) -> str:
    """An e2e latency as nsqadmin shows it: ``"1m21.5s"``, ``"249.21ms"``, ``"12.0us"``."""
    if ns >= 60e9:
        minutes, rest = divmod(ns / 1e9, 60)
        return f"{int(minutes)}m{rest:.1f}s"
    if ns >= 1e9:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f}ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f}us"
    return f"{ns:.0f}ns"


def quantile_label(q: float) -> str:
    """``0.99`` -> ``"p99"``, ``0.999`` -> ``"p99.9"``, ``1.0`` -> ``"p100"``."""
    text = f"{q * 100:.3f}".rstrip("0").rstrip(".")
    return f"p{text}"


def size(n: int) -> str:
    """Bytes, in binary units: ``"512 B"``, ``"12.3 KiB"``, ``"1.0 GiB"``."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def go_duration(text: str) -> str:
    """A Go duration string without its zero tail: ``"24h0m0s"`` -> ``"24h"``,
    ``"1h30m0s"`` -> ``"1h30m"``, ``"1m0s"`` -> ``"1m"``; others as given."""
    if len(text) > 2 and text.endswith("0s") and text[-3] in "hm":
        text = text[:-2]
    if len(text) > 2 and text.endswith("0m") and text[-3] == "h":
        text = text[:-2]
    return text
