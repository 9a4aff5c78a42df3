"""Per-rank pace, measured from outside the ranks (issue 32): parts of the supervisor's
single source (``supervisor/source.py``), standard library only."""
