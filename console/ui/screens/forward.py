"""The forward key (``f`` on the hosts and jobs screens): a local port forwarded to a
port on a host over its SSH connection (``console/transport/forward.py``), and the list
of live forwards, where Delete closes the highlighted one. Forwards live until closed
or until the console quits (``AppFeeds.close``); the hosts and jobs screens show them.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from console.errors import ConsoleError
from console.jobs.models import JobPlan
from console.jobs.plan.ray import dashboard_target
from console.transport.forward import PortForwards, parse_target
from console.ui.services import Services

FORWARD_BINDING = Binding("f", "forward", "Forward")


def forwards_line(forwards: PortForwards | None) -> str:
    """What the hosts and jobs screens show while forwards live ("" when none)."""
    live = forwards.live() if forwards is not None else []
    if not live:
        return ""
    return "⇄ " + "  ·  ".join(f.text() for f in live)


def hidden_forwards_line() -> Static:
    """The ``#forwards`` line a screen composes: hidden until a forward lives."""
    line = Static("", id="forwards", markup=False)
    line.display = False
    return line


def update_forwards_line(screen: Screen[None], services: Services) -> None:
    """The screen's ``#forwards`` line: the live forwards, hidden when there are none."""
    line = screen.query_one("#forwards", Static)
    text = forwards_line(services.forwards)
    line.update(text)
    line.display = bool(text)


def job_suggestion(plan: JobPlan) -> str:
    """A Ray job's dashboard (its own port here too), else the job's first host."""
    target = dashboard_target(plan)
    if target is not None:
        host, dest, port = target
        where = f"{host}:{port}" if dest == "localhost" else f"{host}:{dest}:{port}"
        return f"{where} {port}"
    first = plan.launches[0].host if plan.launches else ""
    return f"{first}:" if first else ""


def open_forwards(screen: Screen[None], services: Services, suggestion: str) -> None:
    """The forward dialog over ``screen``; its forwards line follows when it closes."""
    if services.forwards is None:
        screen.notify(
            "Not connected to the cluster in this view: no connection to forward over",
            severity="warning",
        )
        return
    screen.app.push_screen(
        ForwardScreen(services.forwards, suggestion),
        lambda _none: update_forwards_line(screen, services),
    )


def parse_request(text: str) -> tuple[str, str, int, int]:
    """``HOST:PORT [LOCAL]`` (or ``HOST:DEST:PORT [LOCAL]``) -> (host, dest, port, local)."""
    words = text.split()
    if not 1 <= len(words) <= 2:
        raise ValueError("type HOST:PORT, then optionally the local port")
    host, dest, port = parse_target(words[0])
    local = 0
    if len(words) == 2:
        if not words[1].isdigit() or int(words[1]) > 65535:
            raise ValueError(f"not a local port: {words[1]!r}")
        local = int(words[1])
    return host, dest, port, local


class ForwardScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("delete", "end_forward", "End forward"),
    ]
    DEFAULT_CSS = """
    ForwardScreen { align: center middle; }
    ForwardScreen #forward-box {
        width: 80; height: auto; max-height: 80%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ForwardScreen #forward-list { height: auto; max-height: 12; }
    """

    def __init__(self, forwards: PortForwards, suggestion: str = "") -> None:
        super().__init__()
        self.forwards = forwards
        self.suggestion = suggestion

    def compose(self) -> ComposeResult:
        with Vertical(id="forward-box"):
            yield Static(
                "Forward 127.0.0.1 here to a port on a host, over its SSH connection.\n"
                "HOST:PORT [LOCAL PORT], Enter opens it; Delete ends the highlighted one; "
                "Esc closes.",
                markup=False,
            )
            # The suggestion ("node1:") is the start of what to type: the cursor after
            # it, nothing selected (a selection is replaced by the first key typed).
            yield Input(
                self.suggestion,
                placeholder="node1:6006 6006",
                id="forward-input",
                select_on_focus=False,
            )
            yield Static("", id="forward-message", markup=False)
            yield OptionList(id="forward-list")

    def on_mount(self) -> None:
        self._show()
        box = self.query_one("#forward-input", Input)
        box.focus()
        box.cursor_position = len(box.value)

    def _show(self) -> None:
        choices = self.query_one("#forward-list", OptionList)
        choices.clear_options()
        live = self.forwards.live()
        if live:
            choices.add_options(Option(f.text(), id=str(f.local_port)) for f in live)
        else:
            choices.add_option(Option("no forwards yet", disabled=True))

    def message(self, text: str) -> None:
        self.query_one("#forward-message", Static).update(text)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            host, dest, port, local = parse_request(event.value)
        except ValueError as exc:
            self.message(str(exc))
            return
        self.message(f"opening {host}:{port} ...")
        try:
            opened = await self.forwards.open(host, port, dest_host=dest, local_port=local)
        except ConsoleError as exc:
            self.message(str(exc))
            return
        self.message(f"open: {opened.url}")
        self.app.notify(f"Forwarding {opened.text()}", timeout=8)
        self._show()

    async def action_end_forward(self) -> None:
        choices = self.query_one("#forward-list", OptionList)
        if choices.highlighted is None:
            self.message("highlight a forward in the list first (Tab, arrows)")
            return
        option = choices.get_option_at_index(choices.highlighted)
        if option.id is None:
            return
        await self.forwards.close(int(option.id))
        self.message(f"ended 127.0.0.1:{option.id}")
        self._show()

    def action_close(self) -> None:
        self.dismiss(None)
