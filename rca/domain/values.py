"""How a finding's number is written, in one place: finding sentences, prompts, Slack and the
terminal all show the same `98%`, `0.35 s`, `8.1/s`."""

from __future__ import annotations

# unit -> suffix after the number (ratios and probabilities print as percentages)
SUFFIX = {
    "requests": " requests",
    "tokens": " tokens",
    "seconds": " s",
    "s": " s",
    "per_second": "/s",
    "bytes_per_second": " B/s",
    "MHz": " MHz",
    "celsius": " °C",
    "percent": " %",
}


def format_value(value: float | None, unit: str) -> str:
    """A value in its unit: `98%`, `0.35 s`, `8.1/s`, `1,980 MHz`, `0x40`; `n/a` when unknown."""
    if value is None:
        return "n/a"
    if unit in ("ratio", "probability"):
        return f"{value:.0%}"
    if unit == "bitmask":
        return f"0x{int(value):x}"
    number = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return number + SUFFIX.get(unit, "")
