"""Which pairs of hosts the link phase measures: O(n) pair tests for n hosts.

1. Ring neighbours (i, i+1 mod n), in rounds of disjoint pairs run at the same time: two
   rounds for an even n, three for an odd one (n pairs in all).
2. For each slow pair, each of its two hosts against a host found in no slow pair, and
   the slow pair once more (at most 3 x slow pairs more tests, again in rounds of
   disjoint pairs; the second figure of a pair is the one judged).
3. A follow-up pair that reads slow is read once more too (``read_again``): no pair is
   judged slow on a single figure, which one busy moment on either host can spoil.

A host that is slow in every pair drags its links down itself; a pair that is slow while
both of its hosts are fine with others is a slow link.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Pair = tuple[str, str]


def ring_pairs(hosts: Sequence[str]) -> list[Pair]:
    """The ring's neighbour pairs; none for fewer than 3 hosts (2 hosts: the ring itself
    is the only pair)."""
    n = len(hosts)
    if n < 3:
        return []
    return [(hosts[i], hosts[(i + 1) % n]) for i in range(n)]


def disjoint_rounds(pairs: Iterable[Pair]) -> list[list[Pair]]:
    """Pairs grouped greedily into rounds where no host is in two pairs of a round."""
    rounds: list[list[Pair]] = []
    busy: list[set[str]] = []
    for pair in pairs:
        for index, used in enumerate(busy):
            if pair[0] not in used and pair[1] not in used:
                rounds[index].append(pair)
                used.update(pair)
                break
        else:
            rounds.append([pair])
            busy.append(set(pair))
    return rounds


def read_again(slow: Sequence[Pair], reads: Mapping[frozenset[str], int]) -> list[Pair]:
    """The slow pairs read only once so far: each gets a second figure before it is
    judged (its last figure is the one judged)."""
    return [p for p in slow if reads.get(frozenset(p), 0) < 2]


def follow_up_pairs(slow: Sequence[Pair], hosts: Sequence[str]) -> list[Pair]:
    """Each host of a slow pair against a host in no slow pair (the first such host
    after it in ring order, so the tests spread over the good hosts)."""
    suspects = {h for pair in slow for h in pair}
    good = [h for h in hosts if h not in suspects]
    if not good:
        return []
    wanted: list[Pair] = []
    for index, host in enumerate(h for h in hosts if h in suspects):
        pair = (host, good[index % len(good)])
        if pair not in wanted:
            wanted.append(pair)
    return wanted
