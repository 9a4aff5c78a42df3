"""The job supervisor that runs on every host of a job (``program`` is its main loop): its
local processes (``local``), the other hosts' supervisors (``peers``, ``wire``), the pure
policy (``policy``: fail-fast, the PS rule, lost hosts), the hang watch (``hang``,
``hang_inspect``, ``hang_capture``, and ``hang_sitecustomize``, the hook the ranks load).
``source`` joins the parts (with ``jobctl/common.py`` and ``failure_lines.py``) into ONE
script for the host's Python. Standard library only; imports only ``console.hostprogs``."""
