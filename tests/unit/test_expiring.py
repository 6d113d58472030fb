"""The live loops' per-minute value cache (core/expiring.py)."""
from core.expiring import Expiring


def test_a_value_is_read_again_once_max_age_old_or_when_the_clock_went_back():
    values = iter(range(10))
    cache: Expiring[int] = Expiring(max_age_s=60)
    read = lambda: next(values)  # noqa: E731
    assert [cache.get(t, read) for t in (100, 130, 159.9, 160, 219, 220, 50, 51)] == [0, 0, 0, 1, 1, 2, 3, 3]
    assert cache.reads == 4
