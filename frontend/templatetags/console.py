"""Small formatting helpers of the console: times in the reader's time zone, units, status badges."""
from datetime import datetime
from decimal import Decimal

from django import template
from django.utils.html import format_html
from django.utils.timesince import timesince

register = template.Library()


@register.simple_tag
def when(at: datetime | None, show: str = "relative"):
    """A <time> the browser rewrites in the reader's time zone (show: relative | local | both);
    the server's text is the fallback without JavaScript."""
    if at is None:
        return "—"
    return format_html('<time datetime="{}" data-show="{}">{} ago</time>', at.isoformat(), show, timesince(at))


@register.filter
def gpus(value) -> str:
    """0.500 -> 0.5, 2.000 -> 2."""
    if value is None or value == "":
        return "—"
    return f"{Decimal(str(value)).normalize():f}"


@register.filter
def cores(milli) -> str:
    if milli is None:
        return "—"
    milli = float(milli)
    if milli == 0:
        return "0"
    if milli < 1000:
        return f"{milli:.0f}m"
    return "1 core" if milli == 1000 else f"{_short(milli / 1000)} cores"


@register.filter
def mib(value) -> str:
    if value is None:
        return "—"
    value = float(value)
    if value >= 1024 ** 2:
        return f"{_short(value / 1024 ** 2)} TiB"
    return f"{_short(value / 1024)} GiB" if value >= 1024 else f"{value:.0f} MiB"


def _short(x: float) -> str:
    """At most one decimal, thousands separated: 5.46875 -> 5.5, 308940.0 -> 308,940."""
    return f"{x:,.1f}".removesuffix(".0")


@register.filter
def pct(value) -> str:
    return "—" if value is None else f"{float(value) * 100:.0f}%"


@register.filter
def latency(seconds) -> str:
    """A latency target: 1.5 -> 1.5 s, 0.05 -> 50 ms."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    return f"{seconds:g} s" if seconds >= 1 else f"{seconds * 1000:g} ms"


@register.filter
def badge(value: str, label: str = ""):
    return format_html('<span class="badge {}">{}</span>', value, label or value)


@register.filter
def duration(seconds) -> str:
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


@register.filter
def td_attrs(column) -> str:
    """A bound column's <td> attributes, computed once per table render: django-tables2 recomputes them for
    every cell, a third of a 50-row page's time. (The console's tables use no per-record callable attrs.)"""
    html = getattr(column, "_td_html", None)
    if html is None:
        html = column._td_html = column.attrs["td"].as_html()
    return html


@register.filter
def quota_amount(value, resource: str) -> str:
    """An amount of a quota's resource in its unit: cores for cpu, MiB/GiB for memory, GPUs otherwise."""
    return cores(value) if resource == "cpu" else mib(value) if resource == "memory" else f"{gpus(value)} GPU"
