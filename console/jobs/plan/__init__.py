"""Spec -> plan, pure: which hosts and slots a job takes (``placement``), its environment
layers (``netpresets``), and each kind's processes (``ddp``, ``mpi`` + ``mpi_ranks``, ``ps``,
``ray``), joined by ``planner.plan()``. No network, no backend: this package imports the
job models, the inventory and the host programs' shipping rules, never ``jobs.ssh``,
``jobs.slurm`` or the launch service (an import contract in pyproject.toml)."""
