"""The block pool on tiny worlds with exact answers, plus invariants under random use."""

from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.replay.kv_cache import BlockPool, own_run_key, unit_blocks, unit_keys


def test_refcounts_hits_and_release_order():
    pool = BlockPool(11)
    pool.acquire([1, 2, 3])
    pool.acquire([1, 2])  # a second request sharing the first two blocks
    assert pool.active == {1: 2, 2: 2, 3: 1}
    assert pool.num_active == 3 and pool.num_free == 8
    pool.release([1, 2, 3], anon_full=0, anon_partial=0)
    assert pool.active == {1: 1, 2: 1}
    assert list(pool.inactive) == [3]
    pool.release([1, 2], anon_full=0, anon_partial=0)
    # Released tail first: the tail sits at the LRU front and is evicted first.
    assert list(pool.inactive) == [3, 2, 1]
    pool.check()


def test_prefix_match_stops_at_first_miss_and_counts_active():
    pool = BlockPool(11)
    pool.acquire([1, 2])
    pool.acquire([5])
    pool.release([5], anon_full=0, anon_partial=0)
    assert pool.match_prefix([1, 2, 6, 5], limit_units=4) == (2, 2)  # stops at the miss
    assert pool.match_prefix([5, 7], limit_units=4) == (1, 0)  # cached, not active
    assert pool.match_prefix([1, 2, 3], limit_units=1) == (1, 1)  # the cap
    assert pool.match_prefix([9], limit_units=4) == (0, 0)


def test_eviction_is_lru_and_counts_blocks():
    pool = BlockPool(4)
    pool.acquire([1, 2])
    pool.release([1, 2], anon_full=0, anon_partial=0)  # inactive: 2, 1
    pool.acquire([3, 4])
    assert pool.num_free == 0 and pool.available() == 2
    pool.acquire([5])  # evicts the LRU front: block 2
    assert list(pool.inactive) == [1] and pool.num_evicted == 1
    assert pool.match_prefix([1], 1) == (1, 0)
    pool.check()


def test_reactivating_a_cached_block_does_not_take_a_new_one():
    pool = BlockPool(3)
    pool.acquire([1, 2, 3])
    pool.release([1, 2, 3], anon_full=0, anon_partial=0)
    pool.acquire([1])
    assert pool.active == {1: 1} and pool.num_inactive == 2 and pool.num_free == 0
    pool.check()


def test_anonymous_runs_lose_their_tail_first():
    pool = BlockPool(10)
    pool.allocate_anon(6)
    pool.release([], anon_full=5, anon_partial=1)
    assert pool.num_inactive == 5 and pool.num_free == 5
    pool.allocate_anon(7)  # needs 2 of the run
    assert pool.num_inactive == 3
    key = own_run_key(7, 0)
    pool.release([], anon_full=3, anon_partial=4, run_key=key)
    assert pool.cached_run(key) == 3
    pool.take_run(key, 2)
    assert pool.num_anon_active == 2 and pool.cached_run(key) == 0
    pool.check()


def test_units_cover_several_blocks():
    pool = BlockPool(12, unit=4)
    pool.acquire([10, 11])
    assert pool.num_active == 8 and pool.available() == 4
    pool.release([10, 11], anon_full=0, anon_partial=0)
    assert pool.num_inactive == 8
    pool.allocate_anon(6)  # 4 free, 2 short: evicts one whole unit
    assert pool.num_inactive == 4 and pool.num_evicted == 4 and pool.num_free == 2
    pool.check()


def test_events_report_new_and_evicted_names():
    stored, removed = [], []
    pool = BlockPool(2, on_stored=stored.extend, on_removed=removed.extend)
    pool.acquire([1, 2])
    pool.release([1, 2], anon_full=0, anon_partial=0)
    pool.acquire([1])  # a hit: nothing new is stored
    pool.acquire([3])  # evicts 2
    assert stored == [1, 2, 3] and removed == [2]


def test_unit_keys_chain_prefixes():
    a = unit_keys([7, 8, 9], 512, 64, 1536)
    b = unit_keys([7, 8, 5], 512, 64, 1536)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert unit_keys([8, 9], 512, 64, 1024)[0] != a[1]  # same id, other prefix
    assert unit_keys([7, 8, 9], 512, 64, 1500) == a[:2]  # the partial last block is not a unit
    assert unit_blocks(512, 64) == 8 and unit_blocks(512, 96) == 1
    assert len(unit_keys([1, 2, 3], 512, 96, 1536)) == 16


def test_prefix_caching_off_frees_everything():
    pool = BlockPool(4, enable_prefix_caching=False)
    pool.allocate_anon(3)
    pool.release([], anon_full=2, anon_partial=1)
    assert pool.num_free == 4 and pool.match_prefix([1], 1) == (0, 0)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4), st.booleans()), max_size=40))
def test_invariants_hold_under_random_use(ops):
    pool = BlockPool(16, unit=2)
    held: list[tuple[list[int], int]] = []
    for first, length, release in ops:
        keys = unit_keys(list(range(first, first + length)), 128, 64, length * 128)
        if release and held:
            names, anon = held.pop(0)
            pool.release(names, anon_full=anon, anon_partial=0)
        elif pool.available() >= 2 * length + 1:
            hits = sum(1 for k in keys if k in pool.active)
            if 2 * (length - hits) + 1 <= pool.available():
                pool.acquire(keys)
                pool.allocate_anon(1)
                held.append((keys, 1))
        pool.check()
