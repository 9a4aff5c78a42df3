"""The supervisor's single source, assembled from its parts (``supervisor.py``'s doc).

jobctl's shared part comes first (the supervisor uses its process-table and job-file
helpers), then the failure-line rule (the console's own, one copy), the sampler's health
reading and the health verdict's fail rules (the drain's, one copy), the wire,
the policy, H2's hang capture when that file is present, and the supervisor's own
parts: its local processes, its peers, its hang watch, and its main loop.
"""

from __future__ import annotations

import functools
from pathlib import Path

# Parts are named from hostprogs/: jobctl's shared part and the failure-line rule live
# beside the supervisor's own folder.
_HOSTPROGS = Path(__file__).resolve().parent.parent
_FUTURE = "from __future__ import annotations"
_MAIN = 'if __name__ == "__main__":'
PARTS = (
    "jobctl/common.py",
    "failure_lines.py",
    # The health reading and fail rules of `distconsole health`, for the drain (drain.py).
    "sampler/schema.py",
    "sampler/health_rules.py",
    "sampler/health.py",
    "supervisor/wire.py",
    "supervisor/policy.py",
    "supervisor/hang_inspect.py",  # with hang_capture.py: hang detection is off without them
    "supervisor/hang_capture.py",
    "supervisor/local.py",
    "supervisor/restart.py",
    "guarded_listener.py",  # every listener of ours on a host: the key first, bounded
    "supervisor/link.py",
    "supervisor/peers.py",
    "supervisor/rounds.py",  # torchrun's rounds read from its workers (elastic.py's)
    "supervisor/rendezvous.py",  # --rendezvous-host: the store's rounds and port
    "supervisor/elastic.py",
    "supervisor/drain.py",
    "supervisor/hang.py",
    "supervisor/notify.py",
    # Per-rank pace (issue 32): the meters, the leader's score, the cause in words
    # (causes.py over its GPU and host readers), and the supervisor's hook.
    "pace/meter.py",
    "pace/steps.py",  # a ps worker's steps from its log (its rate is its score)
    "pace/score.py",
    "pace/cause_gpu.py",
    "pace/cause_host.py",
    "pace/causes.py",
    "pace/hook.py",
    "supervisor/program.py",
)
_ENTRY = "supervisor/program.py"


def _part(name: str) -> str:
    text = (_HOSTPROGS / name).read_text()
    if name != _ENTRY and _MAIN in text:
        # A part's own entry point would run before the supervisor's.
        text = text[: text.index(_MAIN)]
    return "\n".join(ln for ln in text.splitlines() if ln.strip() != _FUTURE)


@functools.cache
def supervisor_source() -> str:
    """Every part present, in order, as one script for the host's Python."""
    parts = [_part(name) for name in PARTS if (_HOSTPROGS / name).exists()]
    return (
        f"{_FUTURE}\n# distconsole job supervisor (console/hostprogs/supervisor/program.py)\n"
        + ("\n".join(parts) + "\n")
    )
