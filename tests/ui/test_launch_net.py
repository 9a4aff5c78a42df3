"""The launch form's network preset (issue 10 part 4), with Pilot: a select for
auto/tcp/ib/roce, an IB HCA field shown for ib/roce, checked by the same JobSpec and
netpresets code as ``--net``/``--ib-hca`` (the error under the field it names), and the
preview showing the variables the preset sets. No hosts: the preview is the real planner."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, Select, Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.ui.app import DistConsoleApp
from console.ui.screens.launch import LaunchScreen

INVENTORY = Inventory(
    path="/srv/net/hosts.yaml",
    hosts=(Host(name="node0", address="10.0.0.10"), Host(name="node1", address="10.0.0.11")),
)


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_form(pilot: Pilot[Any], app: DistConsoleApp) -> LaunchScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


def shown(screen: LaunchScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def choose(pilot: Pilot[Any], screen: LaunchScreen, net: str) -> None:
    screen.query_one("#net", Select).value = net
    await pilot.pause()


async def test_tcp_shows_its_variables_in_the_preview() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_form(pilot, app)
        assert screen.query_one("#net", Select).value == "auto"
        assert "NCCL_SOCKET_IFNAME" not in shown(screen, "#launch-preview")
        assert not screen.query_one("#ib_hca", Input).display  # only for ib/roce
        await choose(pilot, screen, "tcp")
        # No interface anywhere: refused under the field to fill, nothing planned.
        assert shown(screen, "#error-interface").startswith(
            "the tcp network preset needs an interface: give one"
        )
        assert shown(screen, "#error-net") == ""
        assert screen.spec is None
        screen.query_one("#interface", Input).value = "eth0"
        await pilot.pause()
        preview = shown(screen, "#launch-preview")
        assert shown(screen, "#error-interface") == ""
        assert "\nnet: tcp on eth0 sets NCCL_SOCKET_IFNAME=eth0 " in preview
        assert "warning: net" not in preview
        for variable in (
            "NCCL_SOCKET_IFNAME=eth0",
            "GLOO_SOCKET_IFNAME=eth0",
            "NCCL_IB_DISABLE=1",
            "OMPI_MCA_btl_tcp_if_include=eth0",
        ):
            assert f"    {variable}" in preview.splitlines(), variable  # in each host's env
        assert screen.spec is not None and screen.spec.net == "tcp"
        assert not screen.query_one("#ib_hca", Input).display


async def test_a_bad_hca_is_refused_naming_the_field_and_a_good_one_is_shown() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_form(pilot, app)
        await choose(pilot, screen, "roce")
        hca = screen.query_one("#ib_hca", Input)
        assert hca.display
        hca.value = "mlx5_0;reboot"
        await pilot.pause()
        assert "is not an NCCL_IB_HCA list" in shown(screen, "#error-ib_hca")
        assert screen.spec is None
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "Not launched: fix the fields" in shown(screen, "#launch-status")
        assert app.focused is hca  # the launch goes to the field it names
        hca.value = "mlx5_0,mlx5_1"
        await pilot.pause()
        assert shown(screen, "#error-ib_hca") == ""
        preview = shown(screen, "#launch-preview").splitlines()
        assert "    NCCL_IB_HCA=mlx5_0,mlx5_1" in preview
        assert "    NCCL_IB_GID_INDEX=3" in preview  # RoCE v2 over IPv4
        # Back to tcp: the HCA field goes away and sets nothing, but is kept in the draft.
        screen.query_one("#interface", Input).value = "ib0"
        await choose(pilot, screen, "tcp")
        assert not hca.display
        assert "NCCL_IB_HCA" not in shown(screen, "#launch-preview")


async def test_the_preset_survives_closing_the_form() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_form(pilot, app)
        await choose(pilot, screen, "ib")
        screen.query_one("#ib_hca", Input).value = "mlx5_2"
        await pilot.press("escape")
        await pilot.pause()
        again = await open_form(pilot, app)
        assert again.query_one("#net", Select).value == "ib"
        assert again.query_one("#ib_hca", Input).value == "mlx5_2"
        assert "    NCCL_IB_HCA=mlx5_2" in shown(again, "#launch-preview").splitlines()
