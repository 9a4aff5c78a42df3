"""The Slurm backend: a job submitted as an sbatch allocation (``backend``), its nodes
(``nodes``), queue (``queue``), state (``state``), local record (``store``) and report
(``report``). May import planning, the SSH backend's job model and the report package;
nothing but the backend seam (``jobs/backend.py``) and the launch service import it."""
