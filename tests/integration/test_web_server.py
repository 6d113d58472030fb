"""tidal/gunicorn.py: each web worker is warm (URLconf imported), its loaded heap frozen and its GIL switch interval
short before its first request; `bench api` measures the server that way (tests/integration/test_bench_api.py)."""
import gc
import sys

from django.urls import clear_url_caches, get_resolver

from tidal import gunicorn as server


def test_a_worker_imports_every_view_and_freezes_what_it_loaded_before_its_first_request(monkeypatch):
    from drf_spectacular.generators import SchemaGenerator

    built = []
    real = SchemaGenerator.get_schema
    monkeypatch.setattr(SchemaGenerator, "get_schema", lambda self, **kw: built.append(kw) or real(self, **kw))
    clear_url_caches()  # as in a fresh worker: nothing resolved yet
    gc.unfreeze()
    interval = sys.getswitchinterval()
    try:
        server.post_worker_init(worker=None)
        assert "url_patterns" in get_resolver().__dict__  # filled by the hook
        # the API schema built once before two threads can race to load drf-spectacular's extensions (a 500)
        assert built == [{"request": None, "public": True}]
        assert gc.get_freeze_count() > 10_000
        assert sys.getswitchinterval() == 0.001
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)
