"""How results are shown: `-o table` (human, the default), `-o json` and `-o yaml` (the API's objects, for scripts).
Tables are plain like kubectl's (no borders), times relative ("3m ago")."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def console(stderr: bool = False) -> Console:
    """Rich on a terminal; on a pipe or file no colour and no wrapping of long rows (a script reads them)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream, stderr=stderr, highlight=False)
    return Console(file=stream, width=10_000, no_color=True, highlight=False, soft_wrap=True)


def emit(data: Any, fmt: Format, table: Callable[[], Iterable[Any]]) -> None:
    """`data` as JSON or YAML, else the renderables `table()` builds."""
    if fmt is Format.json:
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    elif fmt is Format.yaml:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    else:
        out = console()
        if out.is_terminal:
            for renderable in table():
                out.print(renderable)
            return
        with out.capture() as captured:  # on a pipe: rows without the padding after their last column
            for renderable in table():
                out.print(renderable)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def grid(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A kubectl-like table: upper-case headers, no borders, "-" for nothing."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 3, 0, 0))
    for header in headers:
        table.add_column(header.upper(), overflow="fold")
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    return table


def fields(pairs: Iterable[tuple[str, Any]]) -> Table:
    """A describe block: "Label:  value" lines."""
    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, value in pairs:
        table.add_row(f"{label}:", cell(value))
    return table


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ago(text: str | None, now: datetime | None = None) -> str:
    """"3m ago", "2h ago", "in 5m": how kubectl and people say it."""
    when = parse_time(text)
    if when is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    seconds = int((now - when).total_seconds())
    span = duration(abs(seconds))
    if abs(seconds) < 5:
        return "just now"
    return f"{span} ago" if seconds > 0 else f"in {span}"


def duration(seconds: float) -> str:
    """45s, 3m, 2h5m, 3d4h: two units at most."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if minutes < 60:
        return f"{minutes}m"
    if hours < 24:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    rest = hours % 24
    return f"{days}d{rest}h" if rest else f"{days}d"


def number(text: Any) -> str:
    """A decimal from the API without trailing zeros: "0.500" -> 0.5, "2.000" -> 2."""
    if text is None:
        return "-"
    try:
        value = Decimal(str(text))
    except InvalidOperation:
        return str(text)
    return f"{value.normalize():f}"  # "1E+2" written 100


def percent(fraction: float | None) -> str:
    """A rate, which the API gives as a fraction of 1, in whole percents as the console shows it: 0.3 -> 30%."""
    return "-" if fraction is None else f"{float(fraction):.0%}"


def band(min_rate: float, max_rate: float) -> str:
    """A band of rates as the console and the scaling decisions' sentences name it (the server's
    colocation.policy.autoscaling.span; the client has no Django): 0.3, 0.8 -> 30%–80%."""
    return f"{percent(min_rate)}–{percent(max_rate)}"


def latency(seconds: float | None) -> str:
    """A latency target: 1.5 -> 1.5s, 0.05 -> 50ms."""
    if seconds is None:
        return "-"
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"


def cores(milli: Any) -> str:
    """Millicores as cores: 4000 -> 4, 500 -> 0.5."""
    return number(Decimal(str(milli)) / 1000) if milli is not None else "-"


def mem(mib: Any) -> str:
    """MiB as people read it: 16384 -> 16Gi, 512 -> 512Mi, 1536 -> 1.5Gi."""
    if mib is None:
        return "-"
    value = Decimal(str(mib))
    if value >= 1024:
        return f"{number((value / 1024).quantize(Decimal('0.1')))}Gi"
    return f"{number(value)}Mi"
