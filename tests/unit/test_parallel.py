"""The write path's parallel helpers: bounded ordered maps and the fan-out rule."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from polyfs.model.chunks import ChunkIndex
from polyfs.parallel import Occupancy, bounded_map


def test_a_lone_call_fans_out_and_crowded_calls_do_not():
    occ = Occupancy(limit=4)
    with occ.enter() as first:
        with occ.enter() as second:
            with occ.enter() as third:
                assert (first, second, third) == (True, True, False)
        with occ.enter() as again:  # the third left: room again
            assert again
    with occ.enter() as alone:
        assert alone


def test_occupancy_counts_calls_on_many_threads():
    occ = Occupancy(limit=2)
    inside, results = threading.Barrier(3), []

    def call() -> None:
        with occ.enter() as fan_out:
            results.append(fan_out)
            inside.wait(timeout=10)  # all three are inside at once

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, True]  # only the first in fans out
    with occ.enter() as fan_out:
        assert fan_out  # every exit was counted


def test_bounded_map_keeps_order_and_raises_the_first_failure():
    with ThreadPoolExecutor(2) as pool:
        assert list(bounded_map(pool, lambda x: x * x, range(20), 3)) == [x * x for x in range(20)]

        def fail_at_5(x: int) -> int:
            if x == 5:
                raise ValueError("five")
            return x
        with pytest.raises(ValueError, match="five"):
            list(bounded_map(pool, fail_at_5, range(10), 4))


def test_chunk_numbers_are_numpy_s_c_order_and_refuse_outside_the_grid():
    grid = (3, 4, 5)
    idx = ChunkIndex("d", "p/", grid, np.array([0, 7, 59]), np.array([10, 20, 30]))
    for coords in np.ndindex(*grid):
        assert idx.linear_of(coords) == np.ravel_multi_index(coords, grid)
    assert [idx.size_of(n) for n in (0, 7, 59, 26)] == [10, 20, 30, -1]
    for bad in ((3, 0, 0), (0, -1, 0), (0, 0)):
        with pytest.raises(ValueError):
            idx.linear_of(bad)
