"""The inbox between a worker and the app: one message per batch, and put_bounded makes
the worker wait while the app has not taken what waits (a firehose backs up to its
source instead of into memory)."""

from __future__ import annotations

import asyncio

from textual.app import App
from textual.message import Message

from console.ui.inbox import Inbox


class Arrived(Message):
    pass


class InboxApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.inbox: Inbox[int] = Inbox(self, Arrived)
        self.messages = 0
        self.handle = False  # take items when the message arrives
        self.taken: list[int] = []

    def on_arrived(self, _message: Arrived) -> None:
        self.messages += 1
        if self.handle:
            self.taken += self.inbox.take()


async def test_put_bounded_waits_until_the_app_takes() -> None:
    app = InboxApp()
    async with app.run_test() as pilot:
        await app.inbox.put_bounded(1, 3)
        await app.inbox.put_bounded(2, 3)  # two wait: below the bound, no waiting
        third = asyncio.create_task(app.inbox.put_bounded(3, 3))
        await pilot.pause()
        await pilot.pause()
        assert not third.done()  # three wait and nobody took them
        assert app.messages == 1  # one message for the whole batch
        assert app.inbox.take() == [1, 2, 3]
        await asyncio.wait_for(third, 5)
        # With the app taking on each message, every item arrives once, in order.
        app.handle = True
        for i in range(10, 50):
            await app.inbox.put_bounded(i, 2)
        while len(app.taken) < 40:
            await pilot.pause()
        assert app.taken == list(range(10, 50))
