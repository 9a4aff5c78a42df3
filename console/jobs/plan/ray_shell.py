"""The programs the Ray host scripts of ``ray.py`` embed: the head's wait for its nodes
(Python, run with the host's interpreter) and the bash functions both scripts share
(reading /proc, emptying the job process's session, stopping ``ray start``)."""

from __future__ import annotations

# Run by the head's script with the host's python before the driver: waits for the GCS
# port, then for WANT live nodes (ray.nodes()), while the head's `ray start` lives.
WAIT_NODES = """\
import os, socket, sys, time
want, limit, head = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
host, _, port = os.environ["RAY_ADDRESS"].rpartition(":")
deadline = time.time() + limit
def head_alive():
    try:
        with open("/proc/%d/stat" % head) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
def check(what):
    if not head_alive():
        sys.exit("distconsole: the Ray head node ended before " + what)
    if time.time() > deadline:
        sys.exit("distconsole: gave up after %.0f s waiting for %s" % (limit, what))
while True:
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        break
    except OSError:
        check("its GCS port %s:%s opened" % (host, port))
        time.sleep(0.5)
import ray
ray.init(logging_level=40, log_to_driver=False)  # logging.ERROR
while True:
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    if len(alive) >= want:
        break
    check("%d Ray nodes to join (%d so far: %s)" % (want, len(alive), ", ".join(alive)))
    time.sleep(0.5)
ray.shutdown()
print("distconsole: %d Ray nodes joined: %s" % (len(alive), ", ".join(alive)), flush=True)
"""


# Bash functions both scripts use. Only builtins in the loops over /proc: a command
# substitution would fork a process of this session while it is being emptied.
FUNCTIONS = r"""stat_fields() {  # $1: a pid -> "state ppid pgrp session ..." (after its name)
  local line
  { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
  fields=${line##*) }
}
alive() {  # a zombie child still answers kill -0
  stat_fields "$1" || return 1
  case ${fields%% *} in Z|X) return 1 ;; esac
}
kill_session() {  # every other process of this job process's session, by SIGKILL
  local me d
  stat_fields $$ || return 0
  set -- $fields
  me=$4
  for d in /proc/[0-9]*; do
    d=${d#/proc/}
    [ "$d" = $$ ] || [ "$d" = "$me" ] && continue
    stat_fields "$d" || continue
    set -- $fields
    [ "$4" = "$me" ] && kill -KILL "$d" 2>/dev/null
  done
  return 0
}
stop_ray() {  # ray start's own shutdown first, then whatever it left behind
  local i=0
  kill -TERM "$ray" 2>/dev/null
  while alive "$ray" && [ $i -lt WAIT_TENTHS ] && shutdown_can_end; do
    sleep 0.1; i=$((i+1))
  done
  kill_session
  wait "$ray" 2>/dev/null
}"""
