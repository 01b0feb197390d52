"""Options machinery shared by the daemons: flag specs, coercion, TOML config.

Each daemon keeps one table of :class:`OptionSpec` (Go flag name, config
key, kind, help); its command builds click flags from it and
:func:`load_config` reads Go-style TOML config files with it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from nsq._internal.durations import parse_duration

__all__ = ["ConfigError", "OptionSpec", "coerce", "load_config"]


class ConfigError(ValueError):
    """A flag or config-file value that cannot be used.

    Attributes:
        reason: for a value of the wrong type (:func:`coerce`), what was
            expected, without the value or the option (``not an integer``);
            "" otherwise.
    """

    reason = ""


@dataclass(frozen=True)
class OptionSpec:
    """One daemon flag.

    Attributes:
        flag: Go flag name without dashes (``mem-queue-size``).
        cfg: config-file key and options-dataclass field.
        kind: ``str``, ``int``, ``bool``, ``duration``, ``list``,
            ``floatlist`` or ``tls_required``.
        help: the flag's help text, as Go's (plus our status notes).
    """

    flag: str
    cfg: str
    kind: str
    help: str


_BOOL_WORDS = {"true": True, "1": True, "t": True, "yes": True, "false": False, "0": False, "f": False, "no": False}


def _coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word not in _BOOL_WORDS:
        raise ValueError(value)
    return _BOOL_WORDS[word]


#: what each kind of option takes, for the error about a value that does not fit
_EXPECTED = {
    "str": "not a string",
    "int": "not an integer",
    "bool": "not a boolean (true or false)",
    "duration": "not a duration (a Go duration such as \"250ms\", \"2s\", \"1m0s\", or milliseconds)",
    "list": "not a string or a list of strings",
    "floatlist": "not a number or a list of numbers",
    "tls_required": "not true, false or tcp-https",
}


def coerce(spec: OptionSpec, value: Any) -> Any:
    """Convert a flag or config value to the field's type.

    Raises:
        ConfigError: the value does not fit the option (``invalid value 'abc'
            for --mem-queue-size: not an integer``; ``reason`` holds the
            part after the colon).
    """
    kind = spec.kind
    try:
        if kind == "str":
            if isinstance(value, (list, dict, bool)):
                raise TypeError(value)
            return str(value)
        if kind == "int":
            if isinstance(value, (bool, float)):
                raise ValueError(value)
            return int(value)
        if kind == "bool":
            return _coerce_bool(value)
        if kind == "duration":
            if isinstance(value, bool):
                raise ValueError(value)
            return parse_duration(value)
        if kind == "list":
            if isinstance(value, str):
                return [value]
            if not isinstance(value, (list, tuple)):
                raise TypeError(value)
            return [str(v) for v in value]
        if kind == "floatlist":
            items = value if isinstance(value, (list, tuple)) else [value]
            out: list[float] = []
            for item in items:
                if isinstance(item, bool):
                    raise ValueError(item)
                for part in str(item).split(","):
                    if part.strip():
                        try:
                            out.append(float(part))
                        except ValueError:
                            value = part  # name the bad item, not the whole list
                            raise
            return out
        if kind == "tls_required":
            word = str(value).strip().lower()
            if word == "tcp-https":
                return word
            return "true" if _coerce_bool(word) else "false"
    except (TypeError, ValueError):
        reason = _EXPECTED[kind]
        exc = ConfigError(f"invalid value {value!r} for --{spec.flag}: {reason}")
        exc.reason = reason
        raise exc from None
    raise ConfigError(f"unknown option kind {kind}")


def _toml_value(value: Any) -> str:
    """``value`` as it is written in TOML (``"abc"``, ``5``, ``true``, ``[1, 2]``)."""
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):  # dates and times
        return str(value)


def load_config(path: str, specs: dict[str, OptionSpec], aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """Read a Go-style TOML config file into ``{field: value}``.

    Keys are the flag names in snake case (``mem_queue_size``), looked up in
    ``specs`` (by config key) after ``aliases``. Durations may be Go strings
    (``"60s"``) or integers in milliseconds. The flag's own name in snake
    case is accepted too (``e2e_processing_latency_percentile`` for Go's
    ``e2e_processing_latency_percentiles``). A key that names no option is
    an error naming the key, so that a misspelt key is not silently ignored.

    Raises:
        ConfigError: unreadable file, bad TOML, an unknown key or a bad value.
    """
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in config file {path}: {exc}") from None
    by_flag = {spec.flag.replace("-", "_"): cfg for cfg, spec in specs.items()}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = (aliases or {}).get(key, key)
        if name not in specs:
            name = by_flag.get(name, name)
        spec = specs.get(name)
        if spec is None:
            raise ConfigError(f"failed to load config file {path} - unknown key \"{key}\"")
        try:
            out[name] = coerce(spec, value)
        except ConfigError as exc:
            raise ConfigError(f"invalid value in config file {path}: {key} = {_toml_value(value)}: "
                              f"{exc.reason or exc}") from None
    return out


