"""Write samples with exact timestamps into the real Prometheus through its remote-write endpoint.

Prometheus must run with ``--web.enable-remote-write-receiver`` (platform/stack.sh does). The
request body is a protobuf ``WriteRequest`` encoded by hand (the message is tiny) and snappy
block-compressed with cramjam:

    WriteRequest { repeated TimeSeries timeseries = 1; }
    TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
    Label        { string name = 1; string value = 2; }
    Sample       { double value = 1; int64 timestamp = 2; }   // timestamp in epoch ms

Prometheus' rules apply: samples of one series in increasing time order, not older than about an
hour before the newest sample in its head, and never again for a time it already holds (use unique
label sets, e.g. unique pod names, per test). End a series with ``STALE`` so queries stop returning
it right away instead of for the 5-minute lookback.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote

import cramjam
import requests

STALE_NAN_BITS = 0x7FF0000000000002  # Prometheus' staleness marker (a NaN with this payload)


class _Stale:
    """The value of a staleness marker sample (encoded with its exact NaN bits)."""

    def __repr__(self) -> str:
        return "STALE"


STALE = _Stale()

Sample = tuple[int, "float | _Stale"]  # (epoch ms, value)
Series = tuple[Mapping[str, str], Sequence[Sample]]  # (labels incl. __name__, samples in time order)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negative varints
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(ts_ms: int, value: float | _Stale) -> bytes:
    bits = struct.pack("<Q", STALE_NAN_BITS) if value is STALE else struct.pack("<d", value)
    return _varint(1 << 3 | 1) + bits + _varint(2 << 3 | 0) + _varint(ts_ms)


def encode_write_request(series: Iterable[Series]) -> bytes:
    """The uncompressed protobuf WriteRequest (labels sorted by name, as the protocol requires)."""
    body = bytearray()
    for labels, samples in series:
        ts = b"".join(_field(1, _label(k, labels[k])) for k in sorted(labels))
        ts += b"".join(_field(2, _sample(t, v)) for t, v in samples)
        body += _field(1, ts)
    return bytes(body)


def write(prometheus_url: str, series: Iterable[Series], *, batch: int = 2000, timeout: float = 30) -> None:
    """POST the series to /api/v1/write (in batches of `batch` series); raise on any rejection."""
    series = list(series)
    for i in range(0, len(series), batch):
        body = bytes(cramjam.snappy.compress_raw(encode_write_request(series[i:i + batch])))
        resp = requests.post(
            prometheus_url.rstrip("/") + "/api/v1/write",
            data=body,
            headers={
                "Content-Encoding": "snappy",
                "Content-Type": "application/x-protobuf",
                "X-Prometheus-Remote-Write-Version": "0.1.0",
                "User-Agent": "tidal-tests-promwrite",
            },
            timeout=timeout,
        )
        if resp.status_code == 404:
            raise RuntimeError(f"{prometheus_url} has no remote-write receiver: it must run with "
                               "--web.enable-remote-write-receiver (stop it and let platform/stack.sh start one)")
        if resp.status_code // 100 != 2:
            raise RuntimeError(f"remote write rejected: HTTP {resp.status_code}: {resp.text[:500]}")


def wait_queryable(prometheus_url: str, query: str, at_s: float, expected: float, timeout: float = 15) -> None:
    """Poll an instant query at `at_s` until its single value equals `expected` (written data visible)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        resp = requests.get(f"{prometheus_url.rstrip('/')}/api/v1/query?query={quote(query)}&time={at_s}",
                            timeout=10)
        result = resp.json()["data"]["result"] if resp.ok else []
        last = float(result[0]["value"][1]) if len(result) == 1 else result
        if last == expected:
            return
        time.sleep(0.1)
    raise AssertionError(f"{query!r} at {at_s} never became {expected} (last: {last!r})")
