"""The facts probe for hosts without the Python the inventory names: POSIX sh + coreutils.

``console/probe/facts.py`` runs it (``sh -c TEXT distconsole-facts WORK_DIR``) when the
host's Python is missing; it prints the same two marked lines as ``facts_program.py``
(hello, then the facts) with ``python``/``torch`` null. ``QUERY``, ``MARKER`` and
``VERSION`` are filled in from ``facts_program.py`` before it is sent.
"""

FACTS_SHELL = r"""
wd=$1
case $wd in "~") wd=$HOME ;; "~/"*) wd=$HOME/${wd#"~/"} ;; esac
js() {
  printf '%s' "$1" | awk 'BEGIN {ORS = ""}
    {gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t|\r/, " ")
     if (NR > 1) print "\\n"; print}'
}
num() { case $1 in ''|*[!0-9]*) printf null ;; *) printf '%s' "$1" ;; esac; }
os=$( (. /etc/os-release && printf '%s' "$PRETTY_NAME") 2>/dev/null || uname -s)
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)
mem=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024}' /proc/meminfo 2>/dev/null)
notes=""
if mkdir -p "$wd" 2>/dev/null; then
  free=$(df -Pk "$wd" 2>/dev/null | awk 'NR == 2 {printf "%.0f", $4 * 1024}')
else
  free=""; notes="\"work_dir $(js "$wd"): cannot create it\""
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  if out=$(QUERY 2>&1); then st=ok; else st=failed; fi
else
  st=missing; out=""
fi
printf '%s{"program": "facts", "v": %s}\n' "MARKER" "VERSION"
printf '%s{"via": "sh", "hostname": "%s", "kernel": "%s", "arch": "%s", "os": "%s", ' \
  "MARKER" "$(js "$(uname -n)")" "$(js "$(uname -r)")" "$(js "$(uname -m)")" "$(js "$os")"
printf '"cpus": %s, "memory_total_bytes": %s, "python": null, "python_path": null, ' \
  "$(num "$cpus")" "$(num "$mem")"
printf '"torch": null, "nvidia_smi": {"status": "%s", "output": "%s"}, ' "$st" "$(js "$out")"
printf '"work_dir": "%s", "disk_free_bytes": %s, "notes": [%s]}\n' \
  "$(js "$wd")" "$(num "$free")" "$notes"
"""
