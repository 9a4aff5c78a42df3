"""The launch form's Horovod elastic switch (--horovod-elastic): shown for --kind horovod
only, the CLI's checks with the message under it, horovodrun's elastic options in the
preview, and kept in the draft."""

from __future__ import annotations

from test_launch_form import make_app, open_form, set_field, text
from textual.widgets import Checkbox, Select


async def test_the_horovod_elastic_switch_reaches_the_plan() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        switch = screen.query_one("#horovod_elastic", Checkbox)
        assert not switch.display  # ddp: not offered
        screen.query_one("#kind", Select).value = "horovod"
        await pilot.pause()
        await set_field(pilot, screen, "program", "example:horovod")
        assert switch.display
        switch.value = True
        await pilot.pause()
        assert "--max-restarts" in text(screen, "#error-horovod_elastic")
        assert screen.spec is None
        await set_field(pilot, screen, "max_restarts", "2")
        assert text(screen, "#error-horovod_elastic") == ""
        assert screen.spec is not None and screen.spec.horovod_elastic
        preview = text(screen, "#launch-preview")
        assert "--host-discovery-script" in preview and "--min-np" in preview, preview
        await set_field(pilot, screen, "min_hosts", "1")  # now accepted for horovod
        assert screen.spec is not None and screen.spec.min_hosts == 1, screen.errors
        # Kept in the draft: the next form opens with it ticked.
        await pilot.press("escape")
        await pilot.pause()
        again = await open_form(app, pilot)
        assert again.query_one("#horovod_elastic", Checkbox).value
        # Another kind: the switch is hidden and no part of the spec.
        again.query_one("#kind", Select).value = "ddp"
        await pilot.pause()
        await set_field(pilot, again, "program", "example:ddp")
        assert not again.query_one("#horovod_elastic", Checkbox).display
        assert again.spec is not None and not again.spec.horovod_elastic
