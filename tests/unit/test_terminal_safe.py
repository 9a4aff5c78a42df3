"""``display.terminal_safe``: what of a rank's line may reach the user's terminal (issue
23 item 8): colours (SGR) and tabs, no other control sequence or character."""

from __future__ import annotations

import pytest

from console.display import log_line_text, terminal_safe
from console.logs.models import LogLine


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, ünïcode ✓", "plain text, ünïcode ✓"),
        ("a\x1b]0;title\x07b", "ab"),  # a window title (OSC ... BEL)
        ("a\x1b]2;title\x1b\\b", "ab"),  # ... ended by ST
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # a hyperlink
        ("cut \x1b]0;never ended", "cut "),  # an unended string: to the line's end
        ("\x1b[2Jcleared", "cleared"),
        ("\x1b[?1049hscreen\x1b[H", "screen"),  # alternate screen, cursor home
        (
            "\x1b[31mred\x1b[0m \x1b[1;38;5;208mo\x1b[m",
            "\x1b[31mred\x1b[0m \x1b[1;38;5;208mo\x1b[m",
        ),
        ("\x1b[38:2::255:0:0mtrue\x1b[39m", "\x1b[38:2::255:0:0mtrue\x1b[39m"),
        ("\x1bcreset", "reset"),  # ESC c resets the terminal
        ("\x1b(0charset", "charset"),
        ("\x9b2J 8-bit CSI", " 8-bit CSI"),
        ("\x9d0;t\x9c 8-bit OSC", " 8-bit OSC"),
        ("bell\x07 bs\x08 ff\x0c del\x7f nul\x00", "bell bs ff del nul"),
        ("tab\tstays", "tab\tstays"),
        ("lone \x1b", "lone "),
        ("half \x1b[12", "half 12"),
    ],
)
def test_colours_stay_every_other_control_goes(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown


def test_log_line_text_is_safe_unless_raw() -> None:
    line = LogLine("j", "node0", 3, 1, "stdout", "\x1b]0;t\x07\x1b[31mx\x1b[0m", 0.0)
    assert log_line_text(line) == "node0 r3| \x1b[31mx\x1b[0m"
    assert log_line_text(line, raw=True) == "node0 r3| \x1b]0;t\x07\x1b[31mx\x1b[0m"
