"""jobctl, the job helper the console runs on a host for every job operation (``program``:
start, inspect, stop, watch, ...) and the job directory's files and process table it shares
with the supervisor (``common``). ``jobs.ssh.remote_ops`` joins both into one source.
Standard library only; imports only ``console.hostprogs``."""
