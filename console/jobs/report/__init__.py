"""After the fact: the jobs found on hosts (``discover``, with ``hostprogs/jobs_scan.py``)
and a job's post-mortem bundle (``bundle``, with ``hostprogs/job_pack.py``; its
``timeline`` and what it says of elastic membership, ``membership``). Reads jobs
through ``jobs.ssh.control``; the Slurm backend builds its report on this."""
