"""The dashboards' history, read from Prometheus (it scrapes Tidal's /metrics; no new tables hold history)."""
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlsplit

from django.conf import settings
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests import RequestException

RANGES = {"hour": (3600, 15), "day": (86400, 300), "week": (7 * 86400, 1800)}  # name: (span s, step s)
DEFAULT_RANGE = "hour"


@dataclass(frozen=True)
class Line:
    label: str
    points: list[list[float]]  # [[epoch ms, value], ...], the charts' format


class PrometheusDown(Exception):
    pass


def _label(metric: dict, by: tuple[str, ...], fallback: str) -> str:
    return " ".join(str(metric.get(k, "")) for k in by).strip() or fallback


def lines(query: str, *, span_s: int, step_s: int, now: float, by: tuple[str, ...] = (), label: str = "",
          ) -> list[Line]:
    """One line per series of `query` over the last `span_s` seconds, labelled by the `by` labels."""
    client = PrometheusConnect(url=settings.PROMETHEUS_URL, disable_ssl=True)
    # Whole seconds: the client rounds the range's ends, which put the newest point up to half a second after `now`,
    # past the charts' x axis (Chart.js leaves such a point out: a chart of one minute of data drew none).
    end = math.floor(now)
    try:
        result = client.custom_query_range(query, start_time=datetime.fromtimestamp(end - span_s, timezone.utc),
                                           end_time=datetime.fromtimestamp(end, timezone.utc), step=str(step_s),
                                           params={"timeout": "5s"})
    except (PrometheusApiClientException, RequestException) as error:
        message = f"Prometheus at {settings.PROMETHEUS_URL} did not answer: {error}"
        raise PrometheusDown(_without_credentials(message)) from error
    return sorted((Line(_label(r["metric"], by, label or query), _with_gaps(r["values"], step_s)) for r in result),
                  key=lambda line: line.label)


def latest(query: str, *, by: str, now: float, timeout_s: float = 5.0) -> dict[str, float]:
    """Each series' value of `query` at `now`, keyed by its `by` label (a NaN left out: 0/0 over an idle window);
    PrometheusDown when it does not answer within `timeout_s` (the query's own limit and the connection's)."""
    client = PrometheusConnect(url=settings.PROMETHEUS_URL, disable_ssl=True, timeout=timeout_s)
    try:
        result = client.custom_query(query, params={"time": f"{now:.3f}", "timeout": f"{timeout_s:g}s"})
    except (PrometheusApiClientException, RequestException) as error:
        message = f"Prometheus at {settings.PROMETHEUS_URL} did not answer: {error}"
        raise PrometheusDown(_without_credentials(message)) from error
    values = {r["metric"].get(by, ""): _number(r["value"][1]) for r in result}
    return {label: v for label, v in values.items() if label and v is not None}


def _without_credentials(text: str) -> str:
    """`text` without the user:password of PROMETHEUS_URL (basic auth in front of Prometheus is common): the
    message is shown on the overview page."""
    userinfo = urlsplit(settings.PROMETHEUS_URL).netloc.rpartition("@")[0]
    return text.replace(f"{userinfo}@", "") if userinfo else text


def _with_gaps(values: list, step_s: int) -> list[list]:
    """[[ms, value], ...], with a null point wherever samples are missing for more than two steps (Tidal was
    down, or the series absent), so the chart shows a gap instead of a straight line across it."""
    points: list[list] = []
    for t, v in values:
        if points and float(t) - points[-1][0] / 1000 > 2 * step_s:
            points.append([points[-1][0] + step_s * 1000, None])
        points.append([float(t) * 1000, _number(v)])
    return points


def _number(text: str) -> float | None:
    value = float(text)
    return None if value != value else value  # NaN (0/0 over an idle window): a gap, not a point
