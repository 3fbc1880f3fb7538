"""Victim sets: the running jobs a preemptor may stop (:class:`Candidate`) and their subsets in
order of lost work (:func:`victim_sets`), shared by greedy's preemption and migration
heuristics and by defragmentation."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class _HasLost(Protocol):
    @property
    def lost(self) -> float: ...


T = TypeVar("T", bound=_HasLost)


@dataclass(frozen=True)
class Candidate:
    """A running job that a given preemptor may stop."""

    name: str
    priority: int
    queue: str
    gpus: tuple[tuple[str, int], ...]
    lost: float  # GPU-seconds since its last checkpoint
    why: str


def victim_sets(cands: Sequence[T]) -> Iterator[tuple[T, ...]]:
    """Non-empty subsets of ``cands`` (anything with ``lost``, sorted by it) lazily, in order of (lost work,
    count): a heap of subsets whose successors are "add the next candidate" and "swap the
    last for the next", both of which never lower the key."""
    if not cands:
        return
    heap: list[tuple[float, int, tuple[int, ...]]] = [(cands[0].lost, 1, (0,))]
    while heap:
        lost, size, idx = heapq.heappop(heap)
        yield tuple(cands[i] for i in idx)
        last = idx[-1]
        if last + 1 < len(cands):
            nxt = cands[last + 1].lost
            heapq.heappush(heap, (lost + nxt, size + 1, (*idx, last + 1)))
            heapq.heappush(heap, (lost - cands[last].lost + nxt, size, (*idx[:-1], last + 1)))
