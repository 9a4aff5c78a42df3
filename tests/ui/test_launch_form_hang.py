"""The launch form's hang fields with Pilot: the timeout validated under its field, off
leaves the plan without the hook, the stop checkbox needs a timeout (said on the status line)."""

from __future__ import annotations

from test_launch_form import make_app, open_form, set_field, text
from textual.widgets import Checkbox


async def test_hang_timeout_field_and_stop_checkbox() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        assert "DISTCONSOLE_HANG_HOOK" in text(screen, "#launch-preview")  # on by default
        await set_field(pilot, screen, "hang_timeout", "soon")
        assert "must be a number" in text(screen, "#error-hang_timeout")
        await set_field(pilot, screen, "hang_timeout", "-5")
        assert "above 0" in text(screen, "#error-hang_timeout")
        await set_field(pilot, screen, "hang_timeout", "off")
        assert text(screen, "#error-hang_timeout") == ""
        assert "DISTCONSOLE_HANG_HOOK" not in text(screen, "#launch-preview")
        screen.query_one("#stop_on_hang", Checkbox).value = True
        await pilot.pause()
        assert "stop_on_hang: needs hang detection" in text(screen, "#launch-status")
        await set_field(pilot, screen, "hang_timeout", "20")
        assert "stop_on_hang" not in text(screen, "#launch-status")
        assert app.services.launch_draft is not None
        assert app.services.launch_draft.stop_on_hang is True
        assert app.services.launch_draft.fields["hang_timeout"] == "20"
