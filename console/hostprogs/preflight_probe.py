"""Pre-flight probe the console sends to a host (``python3 -u - JSON``, this file on stdin).

Runs after the host's setup line, with the interpreter jobs will use, so the versions
it reports are the ones the job will see. Standard library only; prints its hello
(``{"program": "preflight", "v": VERSION}``), then one JSON line, read by
``console/jobs/preflight/probe_report.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from typing import Any

PROGRAM = "preflight"
VERSION = 3  # of its report (2: ssh to the job's peers, the interface's state; 3: ports)
SSH_TIMEOUT_S = 10
IFF_UP = 0x1
SIOCGIFADDR = 0x8915


def package_version(name: str) -> str | None:
    try:
        from importlib import metadata
    except ImportError:
        return None
    try:
        return metadata.version(name)
    except Exception:
        return None


def port_state(port: int) -> str:
    """Empty when ``port`` can be bound on every address here, else why not."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Servers (torch's TCPStore among them) set SO_REUSEADDR; match them so a socket
    # lingering in TIME_WAIT does not count as "in use".
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
        return ""
    except OSError as exc:
        return exc.strerror or str(exc) or "bind failed"
    finally:
        sock.close()


def ssh_state(peers: list[str]) -> dict[str, Any]:
    """``ssh -o BatchMode=yes -o StrictHostKeyChecking=yes PEER true`` to every peer at
    once, as mpirun/horovodrun will: no password prompt, host keys verified."""
    started: dict[str, subprocess.Popen[bytes] | OSError] = {}
    for peer in peers:
        argv = [
            "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={SSH_TIMEOUT_S}", peer, "true",
        ]  # fmt: skip
        try:
            started[peer] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except OSError as exc:
            started[peer] = exc
    out: dict[str, Any] = {}
    for peer, proc in started.items():
        if isinstance(proc, OSError):
            out[peer] = {"ok": False, "status": None, "error": str(proc)}
            continue
        try:
            _, err = proc.communicate(timeout=SSH_TIMEOUT_S + 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out[peer] = {
                "ok": False,
                "status": None,
                "error": f"no answer within {SSH_TIMEOUT_S}s",
            }
            continue
        text = err.decode(errors="replace").strip().splitlines()
        out[peer] = {
            "ok": proc.returncode == 0,
            "status": proc.returncode,
            "error": text[-1] if text else "",
        }
    return out


def interface_state(name: str) -> dict[str, Any] | None:
    """Whether ``name`` is up and its addresses (IPv4 by ioctl, IPv6 from /proc)."""
    if name not in [n for _i, n in socket.if_nameindex()]:
        return None
    up = None
    try:
        with open(f"/sys/class/net/{name}/flags") as handle:
            up = bool(int(handle.read().strip(), 16) & IFF_UP)
    except (OSError, ValueError):
        pass
    addresses = []
    try:
        import fcntl

        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            packed = struct.pack("256s", name.encode()[:15])
            raw = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, packed)
            addresses.append(socket.inet_ntoa(raw[20:24]))
        finally:
            sock.close()
    except (OSError, ImportError):
        pass  # no IPv4 address (EADDRNOTAVAIL)
    try:
        with open("/proc/net/if_inet6") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 6 and parts[5] == name:
                    hexa = parts[0]
                    addresses.append(":".join(hexa[i : i + 4] for i in range(0, 32, 4)))
    except OSError:
        pass
    return {"up": up, "addresses": addresses}


def gpu_state() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"gpus": None, "gpu_processes": [], "gpu_error": "nvidia-smi not found"}
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, timeout=20)
        apps = subprocess.run(
            [
                smi,
                "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"gpus": None, "gpu_processes": [], "gpu_error": str(exc)}
    if listed.returncode != 0:
        err = listed.stderr.decode(errors="replace").strip()
        return {"gpus": 0, "gpu_processes": [], "gpu_error": err}
    count = sum(
        1 for line in listed.stdout.decode(errors="replace").splitlines() if line.startswith("GPU ")
    )
    procs = []
    for line in apps.stdout.decode(errors="replace").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[1].isdigit():
            procs.append(
                {"gpu": parts[0], "pid": int(parts[1]), "name": parts[2], "used_mib": parts[3]}
            )
    return {"gpus": count, "gpu_processes": procs, "gpu_error": ""}


def main() -> None:
    sys.stdout.write(json.dumps({"program": PROGRAM, "v": VERSION}) + "\n")
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    out: dict[str, Any] = {
        "python": ".".join(str(v) for v in sys.version_info[:3]),
        "executable": sys.executable,
        "packages": {name: package_version(name) for name in args.get("packages", [])},
        "programs": {name: shutil.which(name) for name in args.get("programs", [])},
        "interfaces": sorted(name for _index, name in socket.if_nameindex()),
        "hostname": socket.gethostname(),
        "cwd_ok": {d: os.path.isdir(os.path.expanduser(d)) for d in args.get("dirs", [])},
        "files_ok": [
            os.path.isfile(os.path.join(os.path.expanduser(cwd), os.path.expanduser(path)))
            for cwd, path in args.get("files", [])
        ],
        "uid": os.geteuid() if hasattr(os, "geteuid") else None,
    }
    if args.get("interface"):
        out["interface_state"] = interface_state(str(args["interface"]))
    if args.get("ssh_peers"):
        out["ssh"] = ssh_state([str(p) for p in args["ssh_peers"]])
    if args.get("ports"):
        out["ports"] = {str(port): port_state(int(port)) for port in args["ports"]}
    out.update(gpu_state())
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
