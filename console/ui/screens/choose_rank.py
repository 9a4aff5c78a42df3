"""The shell key's rank chooser (``!`` on the jobs and logs screens): one rank, or one
task of a job without ranks, with the host it runs on."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from console.jobs.ssh.rank_shell import ShellTarget


class ChooseRank(ModalScreen[ShellTarget | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    ChooseRank { align: center middle; }
    ChooseRank #rank-box {
        width: 60; height: auto; max-height: 80%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ChooseRank #rank-choice { height: auto; max-height: 20; }
    """

    def __init__(self, job_id: str, targets: Sequence[tuple[ShellTarget, str]]) -> None:
        super().__init__()
        self.job_id = job_id
        self.targets = list(targets)

    def compose(self) -> ComposeResult:
        with Vertical(id="rank-box"):
            yield Static(
                f"Shell on which rank of {self.job_id}? (Enter opens it, Esc cancels)",
                markup=False,
            )
            yield OptionList(
                *[
                    Option(f"{target_label(t)}  on {host}", id=str(i))
                    for i, (t, host) in enumerate(self.targets)
                ],
                id="rank-choice",
            )

    def on_mount(self) -> None:
        choice = self.query_one("#rank-choice", OptionList)
        choice.highlighted = 0
        choice.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.targets[int(event.option.id or 0)][0])

    def action_cancel(self) -> None:
        self.dismiss(None)


def target_label(target: ShellTarget) -> str:
    return f"rank {target}" if isinstance(target, int) else target
