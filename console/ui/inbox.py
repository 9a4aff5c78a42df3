"""Batching between a worker and the app: many items in, one message per batch out.

A worker ``put``s every item it reads from a core iterator; the first item since the
last ``take`` posts one message. Items arriving before the app handles that message ride
along, so under a burst the app handles one batch per turn of its loop, not one per item.
``put_bounded`` also waits while ``most`` items are waiting: a firehose then backs up to
its source (the host's files) instead of into memory and into one long turn of the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from textual.message import Message
from textual.message_pump import MessagePump

T = TypeVar("T")


class Inbox(Generic[T]):
    def __init__(self, target: MessagePump, message: Callable[[], Message]) -> None:
        self._target = target
        self._message = message
        self._items: list[T] = []
        self._taken = asyncio.Event()

    def put(self, item: T) -> None:
        self._items.append(item)
        if len(self._items) == 1:
            self._target.post_message(self._message())

    async def put_bounded(self, item: T, most: int) -> None:
        """``put``, then wait until fewer than ``most`` items wait (the app took them)."""
        self.put(item)
        while len(self._items) >= most:
            self._taken.clear()
            await self._taken.wait()

    def take(self) -> list[T]:
        items, self._items = self._items, []
        self._taken.set()
        return items

    def __len__(self) -> int:
        return len(self._items)
