"""What the sub-commands share, not sub-commands themselves: the common options
(``options``), the job options and spec building of plan/launch/export (``job_options``),
launching and listing under Slurm (``launch_slurm``), and the demo's own job
(``demo_job``). ``cli.py`` imports a sub-command by its name from ``console.commands``;
nothing here is one."""
