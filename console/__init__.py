"""distconsole: a keyboard-driven console for multi-node GPU training clusters."""

from __future__ import annotations

__version__ = "0.1.0"
