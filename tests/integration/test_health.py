"""/healthz and /readyz (frontend/health.py): what Kubernetes' probes see, on the real PostgreSQL and Redis.

Failures are made real rather than mocked: the check is pointed at a closed local port (the shared database and
Redis cannot be stopped inside the suite), and the connection attempt fails as it would in an outage.
"""
import socket

from django.db import connection
from django.db.utils import ConnectionHandler
from drf_spectacular.generators import SchemaGenerator

from frontend import health


def closed_port() -> int:
    """A local port nothing listens on: bound by the OS, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthz_answers_without_touching_anything(client):
    # No `db` fixture: pytest-django refuses database access here, so a query would fail the request. Liveness
    # must not depend on the database: an outage of it must not get web pods restarted.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "sessionid" not in response.cookies and "csrftoken" not in response.cookies


def test_readyz_is_ready_when_the_database_and_redis_answer(db, client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}
    assert "no-cache" in response["Cache-Control"]


def assert_not_ready(response, failing: str, error: str) -> None:
    """503, naming the one failing check and its error class; the other check still answers."""
    assert response.status_code == 503
    body = response.json()
    other = {"database": "redis", "redis": "database"}[failing]
    assert body["failing"] == [failing]
    assert body["checks"] == {failing: f"error: {error}", other: "ok"}


def unreachable_database() -> dict:
    """The test database's settings, pointed where nothing answers: a closed port for a server database, a file in
    a folder that does not exist for SQLite."""
    if connection.vendor == "sqlite":
        return {**connection.settings_dict, "NAME": "/nonexistent/tidal.sqlite3", "CONN_MAX_AGE": 0}
    return {**connection.settings_dict, "PORT": str(closed_port()), "HOST": "127.0.0.1", "CONN_MAX_AGE": 0}


def test_readyz_names_redis_when_redis_is_unreachable(db, client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    assert_not_ready(client.get("/readyz"), "redis", "ConnectionError")


def test_readyz_names_the_database_when_it_is_unreachable(db, client, monkeypatch):
    # In a connection handler of its own: the test's own connection (and its transaction) stay as they are.
    unreachable = ConnectionHandler({"default": unreachable_database()})
    monkeypatch.setattr(health, "connections", unreachable)
    try:
        response = client.get("/readyz")
    finally:
        unreachable.close_all()
    assert_not_ready(response, "database", "OperationalError")


def test_probes_are_anonymous_unthrottled_and_answer_over_plain_http(db, client, settings):
    # Production settings (DJANGO_DEBUG=0, TIDAL_HTTPS=1) redirect plain HTTP; the kubelet probes over plain HTTP.
    settings.SECURE_SSL_REDIRECT = True
    for _ in range(30):  # beyond any throttle rate's burst: probes come every few seconds from every kubelet
        assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/jobs/").status_code == 301  # while the console itself is redirected to HTTPS


def test_probes_accept_only_get(client):
    assert client.post("/healthz").status_code == 405
    assert client.post("/readyz").status_code == 405


def test_probes_are_not_in_the_api_schema():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    assert not [p for p in paths if "healthz" in p or "readyz" in p]
