"""--sync: a local code directory listed and hashed (``tree``), pushed to every host as one
content-addressed copy (``push``, with ``hostprogs/sync_program.py``), and old copies removed
(``gc``, which asks ``jobs.ssh.control`` which jobs still run)."""
