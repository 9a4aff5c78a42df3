"""The footer rebuilds its keys only when the keys it would show changed."""

from __future__ import annotations

from textual.widgets._footer import FooterKey

from console.inventory import Host, Inventory
from console.ui.app import DistConsoleApp
from console.ui.widgets.keys_footer import KeysFooter

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{i}") for i in range(3)),
)


def footer_keys(app: DistConsoleApp) -> dict[str, FooterKey]:
    footer = app.screen.query_one(KeysFooter)
    return {key.key: key for key in footer.query(FooterKey)}


async def test_same_keys_keep_their_widgets_and_changed_keys_show() -> None:
    app = DistConsoleApp(INVENTORY, connections_factory=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        before = footer_keys(app)
        assert {"h", "j", "v"} <= set(before) and "m" not in before  # detailed view (3 hosts)

        app.screen.refresh_bindings()  # nothing changed: the same key widgets stay
        await pilot.pause()
        after = footer_keys(app)
        assert after.keys() == before.keys()
        assert all(after[k] is before[k] for k in before)

        await pilot.press("v")  # the dense view adds its own keys
        await pilot.pause()
        dense = footer_keys(app)
        assert {"m", "s", "b"} <= set(dense)
        assert not dense["m"].has_class("-compact")  # the footer's own look, not compact

        await pilot.press("v")
        await pilot.pause()
        assert "m" not in footer_keys(app)
