"""A scheduling cycle allocates many short-lived objects; Python's full collections would also walk every object
that existed before the cycle (the snapshot, Django, the loaded modules), 0.1-0.2 s each in a worker. Freezing them
for the cycle (gc.freeze, O(1)) keeps collections to what the cycle creates; they rejoin the oldest generation
after. The live loop and the benchmark time the same thing this way."""
import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
