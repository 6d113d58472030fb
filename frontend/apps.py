from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Web console"

    def ready(self) -> None:
        _memoize_tables2_signatures()


def _memoize_tables2_signatures() -> None:
    """django-tables2 calls inspect.signature() on a render method for every cell it draws: a third of a 25-row
    jobs page's time. A function's signature never changes, so compute it once per function."""
    from django_tables2 import utils

    compute, known = utils.signature, {}

    def signature(fn):
        key = getattr(fn, "__func__", fn)  # bound methods are new objects on every access
        if key not in known:
            known[key] = compute(fn)
        return known[key]

    utils.signature = signature
