"""Kubernetes quantities in job files and flags: converted to millicores and MiB, or refused naming the field."""
import pytest

from tidal_cli import quantities


@pytest.mark.parametrize("value, milli", [
    (4, 4000), ("4", 4000), ("4000m", 4000), ("500m", 500), (0.5, 500), ("0.5", 500), (".25", 250), ("1.5", 1500),
    ("2e3", 2000000), ("1e1", 10000), ("0.0001", 1),  # finer than 1m rounds up, as Kubernetes does
])
def test_cpu(value, milli):
    assert quantities.cpu_milli(value) == milli


@pytest.mark.parametrize("value, mib", [
    ("16Gi", 16384), ("512Mi", 512), ("1Ti", 1048576), ("1.5Gi", 1536), ("1G", 954), ("1000M", 954),
    (2**20, 1), ("1048576", 1), ("4096Ki", 4), ("1e9", 954), (1, 1),  # a byte is still one MiB at least
])
def test_memory(value, mib):
    assert quantities.memory_mib(value) == mib


@pytest.mark.parametrize("value, words", [
    ("4 cores", "not a quantity"), ("-1", "not a quantity"), ("16GB", "not a quantity"), ("", "not a quantity"),
    ("0", "must be above 0"), (0, "must be above 0"), ("0Mi", "must be above 0"), (True, "expected a quantity"),
    ([1], "expected a quantity"), (None, "expected a quantity"), ("1e3Mi", "both an exponent and a suffix"),
    ("1e99999", "out of range"), ("nan", "not a quantity"), ("inf", "not a quantity"), ("16gi", "not a quantity"),
])
def test_bad_memory_is_refused_naming_the_field(value, words):
    with pytest.raises(quantities.QuantityError) as error:
        quantities.memory_mib(value)
    assert str(error.value).startswith("memory: ") and words in str(error.value)


def test_bad_cpu_names_cpu():
    with pytest.raises(quantities.QuantityError, match=r"^cpu: '4x' is not a quantity"):
        quantities.cpu_milli("4x")
