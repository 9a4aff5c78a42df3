"""Pre-flight: a plan -> one request per host (``job``), every host probed at once
(``probe``, with ``hostprogs/preflight_probe.py``; ``probe_report`` decodes its answer), and
the findings judged (``checks``, pure). Imports planning and transport, never a backend
(``jobs.ssh``, ``jobs.slurm``): pre-flight runs before either is chosen."""
