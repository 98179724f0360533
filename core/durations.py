"""The one parser of durations: Spark's time strings and trigger intervals.

Both spellings Spark users write are accepted everywhere: the short forms of
``spark.network.timeout``-style options (``500ms``, ``30s``, ``15m``, ``1h``, ``1d``) and
the interval forms of ``trigger(processingTime=...)`` (``0 seconds``, ``500 milliseconds``,
``2 minutes``). ``m`` means minutes, as in Spark.
"""

from __future__ import annotations

import re

from backlog_source.core.errors import ConfigError

_DURATION = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNIT_MS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1_000, "sec": 1_000, "secs": 1_000, "second": 1_000, "seconds": 1_000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}
EXAMPLES = "'500ms', '30s', '15m', '1h', '0 seconds', '500 milliseconds', '2 minutes'"


def duration_ms(name: str, text: object, *, bare_number_unit: str | None = "ms") -> int:
    """Milliseconds of ``text``; ``name`` is the option or argument named in the error.

    A bare number means ``bare_number_unit`` (Spark's ``timeStringAsMs`` reads it as ms);
    with None a unit is required. Raises :class:`ConfigError` saying what is allowed.
    """
    ms = parsed_duration_ms(text, bare_number_unit=bare_number_unit)
    if ms is None:
        raise ConfigError(f"{name} must be a duration such as {EXAMPLES}, got {text!r}")
    return ms


def parsed_duration_ms(text: object, *, bare_number_unit: str | None = "ms") -> int | None:
    """Milliseconds of ``text`` (as :func:`duration_ms`), or None when it is not a duration:
    for a caller that names the option in its own error (core/settings.py)."""
    match = _DURATION.match(str(text))
    unit = match.group(2).lower() if match else ""
    if not unit and match is not None:
        unit = bare_number_unit or ""
    if match is None or unit not in _UNIT_MS:
        return None
    return round(float(match.group(1)) * _UNIT_MS[unit])


def trigger_interval_ms(name: str, text: object) -> int:
    """Milliseconds of a trigger interval such as ``"0 seconds"`` or ``"500ms"``: a unit is
    required (a bare number is refused, as ``trigger(processingTime=...)`` refuses it). Raises
    :class:`ConfigError` naming ``name``."""
    return duration_ms(name, text, bare_number_unit=None)


def duration_seconds(name: str, text: object) -> float:
    """Seconds of a trigger interval (:func:`trigger_interval_ms`)."""
    return trigger_interval_ms(name, text) / 1000


def processing_time(interval_ms: int) -> str:
    """The ``trigger(processingTime=...)`` text of an interval of ``interval_ms``, which this
    module parses back to the same milliseconds."""
    return f"{interval_ms} milliseconds"
