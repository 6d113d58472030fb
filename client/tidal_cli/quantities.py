"""Kubernetes quantities, as people write them in job files: `cpu: 4`, `cpu: 4000m`, `cpu: "0.5"`; `memory: 16Gi`,
`512Mi`, `1G`. Converted to the API's units (CPU millicores, memory MiB), rounded up to them as Kubernetes rounds up
to its precision; anything else is refused with the field and an example."""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

# Kubernetes' suffixes (k8s.io/apimachinery resource.Quantity): binary (Ki…Ei) and decimal (k…E, and m for milli).
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"m": Fraction(1, 1000), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
QUANTITY = re.compile(r"^(?P<number>\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+-]?\d+))?(?P<suffix>[KMGTPE]i|[mkMGTPE])?$")
MIB = 2**20
MAX_EXPONENT = 30  # 1e30 bytes is far beyond any machine; bounds the exact arithmetic


class QuantityError(ValueError):
    """A quantity that is not one, or that does not convert exactly; the message says which and why."""


def parse(value: object, what: str) -> Fraction:
    """A quantity as an exact number of base units (cores, bytes)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise QuantityError(f"{what}: expected a quantity such as 4, 500m, 16Gi, got {value!r}")
    text = str(value).strip()
    match = QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{what}: {text!r} is not a quantity (examples: 4, 500m, 16Gi, 512Mi, 1G)")
    try:
        number = Fraction(Decimal(match["number"]))
    except InvalidOperation:  # the pattern admits only digits; kept for safety
        raise QuantityError(f"{what}: {text!r} is not a quantity") from None
    if match["exp"]:
        if match["suffix"]:
            raise QuantityError(f"{what}: {text!r} has both an exponent and a suffix")
        if abs(int(match["exp"])) > MAX_EXPONENT:
            raise QuantityError(f"{what}: {text!r} is out of range")
        number *= Fraction(10) ** int(match["exp"])
    suffix = match["suffix"] or ""
    return number * (BINARY[suffix] if suffix in BINARY else DECIMAL[suffix])


def cpu_milli(value: object) -> int:
    """`4` → 4000, `4000m` → 4000, `0.5` → 500; finer than 1m rounds up, as Kubernetes does."""
    millis = math.ceil(parse(value, "cpu") * 1000)
    if millis < 1:
        raise QuantityError(f"cpu: {value!r} must be above 0 (e.g. 500m or 4)")
    return millis


def memory_mib(value: object) -> int:
    """`16Gi` → 16384, `512Mi` → 512, `1G` → 954 (10^9 bytes, rounded up to whole MiB: Tidal counts memory in MiB,
    and a request never shrinks). A bare number is bytes, as in Kubernetes."""
    mib = math.ceil(parse(value, "memory") / MIB)
    if mib < 1:
        raise QuantityError(f"memory: {value!r} must be above 0 (e.g. 512Mi or 16Gi)")
    return mib
