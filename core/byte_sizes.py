"""The one parser of byte sizes: Spark's byte strings (``spark.driver.maxResultSize``-style).

``256m``, ``1g``, ``512k``, ``1048576`` (bytes), ``64mb``: units are binary (``k`` = 1024), as
in Spark's ``JavaUtils.byteStringAsBytes``; a bare number is bytes.
"""

from __future__ import annotations

import re

from backlog_source.core.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNIT_BYTES = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
EXAMPLES = "'256m', '1g', '512k', '1048576'"


def size_bytes(name: str, text: object) -> int:
    """Bytes of ``text``; ``name`` is the option named in the error. Raises
    :class:`ConfigError` saying what is allowed."""
    size = parsed_size(text)
    if size is None:
        raise ConfigError(f"{name} must be a size such as {EXAMPLES} (binary units, a bare number is bytes), "
                          f"got {text!r}")
    return size


def parsed_size(text: object) -> int | None:
    """Bytes of ``text``, or None when it is not a size: for a caller that names the option
    in its own error (core/settings.py)."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNIT_BYTES:
        return None
    return int(match.group(1)) * _UNIT_BYTES[unit]


def describe(size: int) -> str:
    """``size`` in the largest binary unit that keeps it readable (``"256 MiB"``)."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size} B"
