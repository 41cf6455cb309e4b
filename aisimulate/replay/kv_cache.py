"""KV block pool of one scheduler rank: active refcounts, an LRU of cached blocks, prefix matching.

Shareable content is named in *units* of ``unit`` consecutive blocks: the blocks one hash id of
the workload covers (a 512-token trace block is 8 blocks of 64 tokens). A unit's name chains its
hash id with its parent's name, so two requests share a unit exactly when they share the whole
prefix up to it — the reference replay's chained block hashes, at the granularity the trace
itself has, which makes prefix matching and caching cost per hash id rather than per block.

The pool keeps

* ``active``: unit name -> reference count, for units held by running requests;
* an anonymous active count: blocks nobody else can match (a request's own unique blocks, the
  partial last block, blocks filled while decoding), counted, not named;
* ``inactive``: an LRU (oldest first) of cached entries with no holder, evicted front-first when
  space is needed. An entry is a named unit or a *run*: a request's released anonymous blocks,
  kept as one entry. A preempted request's run is named so that its recompute can hit it.

Capacity: ``unit * len(active) + anonymous + inactive <= num_blocks``. Allocation is
all-or-nothing: callers check :meth:`available` (free plus evictable) first, as vLLM's
``allocate_slots`` returns None rather than half-allocating. Eviction takes whole units (a unit
is cached or not), and a run's tail first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from itertools import count

# Chain seeds; integers only so that names are identical in every process.
_ROOT = 0x6A09E667F3BCC908


def unit_blocks(hash_block_tokens: int, block_size: int) -> int:
    """Blocks per named unit: a hash id's blocks when they align, else one block."""
    return hash_block_tokens // block_size if hash_block_tokens % block_size == 0 else 1


def unit_keys(hash_ids: Sequence[int], hash_block_tokens: int, block_size: int, num_tokens: int) -> list[int]:
    """Chained names of the full units of a prompt described by hash ids.

    With aligned blocks a unit is one hash id's worth of blocks. Otherwise a unit is one block,
    named by the run of (hash id, offset) segments its tokens cover.
    """
    parent = _ROOT
    keys: list[int] = []
    unit = unit_blocks(hash_block_tokens, block_size)
    if unit > 1 or hash_block_tokens == block_size:
        full = min(num_tokens, len(hash_ids) * hash_block_tokens) // (unit * block_size)
        for hash_id in hash_ids[:full]:
            parent = hash((parent, hash_id))
            keys.append(parent)
        return keys
    full = min(num_tokens, len(hash_ids) * hash_block_tokens) // block_size
    for j in range(full):
        start, end = j * block_size, (j + 1) * block_size
        first, last = start // hash_block_tokens, (end - 1) // hash_block_tokens
        content = tuple(
            (hash_ids[i], max(start, i * hash_block_tokens) - i * hash_block_tokens)
            for i in range(first, last + 1)
        )
        parent = hash((parent, content))
        keys.append(parent)
    return keys


def own_run_key(request_id: int, preemption: int) -> tuple[str, int, int]:
    """Name of the blocks a preempted request leaves behind for its own recompute."""
    return ("own", request_id, preemption)


class BlockPool:
    """Blocks of one rank. Events (``on_stored(names)``, ``on_removed(names)``) feed a KV router."""

    def __init__(
        self,
        num_blocks: int,
        *,
        unit: int = 1,
        enable_prefix_caching: bool = True,
        on_stored: Callable[[list[int]], None] | None = None,
        on_removed: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.num_blocks = num_blocks
        self.unit = unit
        self.enable_prefix_caching = enable_prefix_caching
        self.active: dict[int, int] = {}
        self.num_anon_active = 0
        self.inactive: OrderedDict[object, int] = OrderedDict()
        self.num_inactive = 0
        self.num_evicted = 0
        self._runs = count()
        self._on_stored = on_stored
        self._on_removed = on_removed

    # ---- occupancy -----------------------------------------------------------------------
    @property
    def num_active(self) -> int:
        return self.unit * len(self.active) + self.num_anon_active

    @property
    def num_free(self) -> int:
        return self.num_blocks - self.num_active - self.num_inactive

    def available(self) -> int:
        """Blocks an allocation can get: free ones plus evictable cached ones."""
        return self.num_blocks - self.unit * len(self.active) - self.num_anon_active

    # ---- lookup --------------------------------------------------------------------------
    def match_prefix(self, keys: Sequence[int], limit_units: int) -> tuple[int, int]:
        """(units matched, of which active) over the longest cached run of ``keys[:limit_units]``."""
        if not self.enable_prefix_caching:
            return 0, 0
        active, inactive = self.active, self.inactive
        matched = hot = 0
        for key in keys[:limit_units]:
            if key in active:
                hot += 1
            elif key not in inactive:
                break
            matched += 1
        return matched, hot

    def cached_run(self, key: tuple[str, int, int]) -> int:
        """Blocks left of a named run (0 if evicted)."""
        return self.inactive.get(key, 0) if self.enable_prefix_caching else 0

    # ---- allocation ----------------------------------------------------------------------
    def _make_room(self, n: int) -> None:
        # num_free spelled out: this runs on nearly every decode pass.
        free = self.num_blocks - self.unit * len(self.active) - self.num_anon_active - self.num_inactive
        if n > free:
            self.evict(n - free)

    def evict(self, n: int) -> None:
        """Free at least ``n`` blocks from the LRU front: whole units; runs lose their tail."""
        removed: list[int] = []
        inactive = self.inactive
        freed = 0
        while freed < n:
            key, size = inactive.popitem(last=False)
            if isinstance(key, int):
                removed.append(key)
            elif size > n - freed:
                inactive[key] = size - (n - freed)
                inactive.move_to_end(key, last=False)
                size = n - freed
            freed += size
        self.num_inactive -= freed
        self.num_evicted += freed
        if removed and self._on_removed is not None:
            self._on_removed(removed)

    def _reference(self, key: int) -> bool:
        """Take a reference on a unit held or cached here (reactivating a cached one)."""
        refs = self.active.get(key)
        if refs is not None:
            self.active[key] = refs + 1
        elif self.inactive.pop(key, None) is not None:
            self.num_inactive -= self.unit
            self.active[key] = 1
        else:
            return False
        return True

    def acquire(self, keys: Sequence[int]) -> None:
        """Hold named units, in prefix order: hits take a reference (reactivating cached
        units), misses take new blocks."""
        active, unit = self.active, self.unit
        new = [key for key in keys if not self._reference(key)]
        if new:
            self._make_room(unit * len(new))
            for key in new:
                active[key] = 1
            if self._on_stored is not None:
                self._on_stored(new)

    def cache_units(self, keys: Sequence[int], room: int) -> int:
        """Register units copied up from a lower tier as cached (inactive), using at most
        ``room`` available blocks; returns how many units were placed."""
        placed = 0
        for key in keys:
            if key in self.active or key in self.inactive:
                placed += 1
                continue
            if room < self.unit:
                break
            self._make_room(self.unit)
            self.inactive[key] = self.unit
            self.num_inactive += self.unit
            room -= self.unit
            placed += 1
        return placed

    def allocate_anon(self, n: int) -> None:
        if n > 0:
            self._make_room(n)
            self.num_anon_active += n

    def free_anon(self, n: int) -> None:
        self.num_anon_active -= n

    def take_run(self, key: tuple[str, int, int], n: int) -> None:
        """A recomputing request takes back the first ``n`` blocks of its run; the rest is freed."""
        size = self.inactive.pop(key)
        self.num_inactive -= size
        self.num_anon_active += n

    # ---- release -------------------------------------------------------------------------
    def release(
        self,
        keys: Sequence[int],
        *,
        anon_full: int,
        anon_partial: int,
        run_key: tuple[str, int, int] | None = None,
    ) -> None:
        """Drop a request's blocks, tail first so its tail is evicted before its prefix: the
        anonymous full blocks (one run, named ``run_key`` when the request will be recomputed),
        then the named units last to first. Without prefix caching everything is freed."""
        self.num_anon_active -= anon_full + anon_partial
        if not self.enable_prefix_caching:
            return
        if anon_full:
            key: object = run_key if run_key is not None else ("run", next(self._runs))
            self.inactive[key] = anon_full
            self.num_inactive += anon_full
        self._drop(reversed(keys))

    def _drop(self, keys: Iterable[int]) -> None:
        """Give up a reference on each unit; the last one leaves it cached (evictable)."""
        active, inactive, unit = self.active, self.inactive, self.unit
        for key in keys:
            refs = active[key]
            if refs > 1:
                active[key] = refs - 1
            else:
                del active[key]
                inactive[key] = unit
                self.num_inactive += unit

    # ---- copies to host memory -----------------------------------------------------------
    def pin(self, keys: Sequence[int]) -> list[int]:
        """Hold units a copy is reading (offload to host) so that nothing evicts them before it
        lands; returns those still here (an evicted unit has nothing left to copy)."""
        return [key for key in keys if self._reference(key)]

    def unpin(self, keys: Sequence[int]) -> None:
        self._drop(keys)

    def check(self) -> None:
        """Invariants (tests and debugging)."""
        assert all(r > 0 for r in self.active.values())
        assert self.num_anon_active >= 0
        assert self.num_inactive == sum(self.inactive.values())
        assert self.num_active + self.num_inactive <= self.num_blocks, (self.num_active, self.num_inactive)
        assert not (set(self.active) & {k for k in self.inactive if isinstance(k, int)})
