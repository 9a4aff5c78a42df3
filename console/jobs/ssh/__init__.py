"""The SSH backend: a plan started detached on every host (``runner``, with jobctl and the
hosts' supervisors: ``remote_ops``, ``supervision``, ``jobctl_reports``), watched
(``watch``, ``failure_lines``, ``failure_tail``), stopped and listed (``control``); the job as
the console knows it (``job``) and a shell on a rank's host (``rank_shell``). Imports
planning and pre-flight; neither imports it."""
