"""The whole-stack tests' order: the running demo (test_demo_running) starts with the session and builds up its load
beside the other tests; its own tests come after them, and last those that stop a service the session shares."""
import pytest

# Modules whose tests stop or restart a service the whole session shares (PostgreSQL, Redis, Kafka, Prometheus, a
# Celery worker's broker), and the one whose demo must not meet them.
_STOPS_SHARED = {"test_faults_database", "test_faults_kafka", "test_faults_prometheus", "test_faults_redis",
                 "test_faults_worker"}
_DEMO = "test_demo_running"


_RANK = {_DEMO: 1, **dict.fromkeys(_STOPS_SHARED, 2)}  # every other module: 0, first


def _module(item: pytest.Item) -> str:
    return item.module.__name__.rpartition(".")[2]


def _demo_module(session: pytest.Session):
    """test_demo_running's module when the session runs some of its tests, else None."""
    return next((item.module for item in getattr(session, "items", ()) if _module(item) == _DEMO), None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_demo_running's demo needs minutes of real load: it starts with the session and runs beside the other
    tests (in pytest-django's order); its own tests come after them, and last those that stop a shared service,
    which the demo must not meet."""
    items.sort(key=lambda item: _RANK.get(_module(item), 0))


def pytest_collection_finish(session: pytest.Session) -> None:
    demo = _demo_module(session)
    if demo is not None and not session.config.option.collectonly:
        demo.start_early()


def pytest_sessionfinish(session: pytest.Session) -> None:
    demo = _demo_module(session)
    if demo is not None:
        demo.stop_early()

