"""Go ``time.Duration`` syntax for flags and config files.

``parse_duration("1m0s") == 60.0``; ``format_duration(60.0) == "1m0s"``.
Values are seconds as floats.
"""

from __future__ import annotations

import re

__all__ = ["parse_duration", "format_duration"]

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str | int | float) -> float:
    """Parse a Go duration (``"1h0m0s"``, ``"250ms"``, ``"-1.5s"``) to seconds.

    ``"0"`` is allowed without a unit, as in Go. Numbers (from a TOML config)
    are taken as milliseconds, as Go nsqd's config loader does.

    Raises:
        ValueError: the text is not a Go duration.
    """
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    if isinstance(text, (int, float)):
        return float(text) / 1000.0
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    pos = 0
    total = 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def _fmt_float(value: float) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"


def format_duration(seconds: float) -> str:
    """Format seconds as Go's ``Duration.String()`` does (``"1m0s"``)."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 1:
        if s < 1e-6:
            return f"{sign}{round(s * 1e9)}ns"
        if s < 1e-3:
            return f"{sign}{_fmt_float(s * 1e6)}µs"
        return f"{sign}{_fmt_float(s * 1e3)}ms"
    hours = int(s // 3600)
    s -= hours * 3600
    minutes = int(s // 60)
    s -= minutes * 60
    out = sign
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return out + f"{_fmt_float(s)}s"
