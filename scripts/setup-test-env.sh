#!/usr/bin/env bash
# Everything the test suite needs on a fresh Debian 12 machine (run as root).
# Idempotent: a second run only checks and returns.
#
# - apt: OpenSSH server (real sshd test hosts), Open MPI, cmake/g++ (horovod build), tmux
# - /opt/distconsole-test/venv from /usr/bin/python3: world-readable, because the sshd
#   test hosts run as unprivileged test users that must use the same torch/horovod
# - distconsole itself (editable) with its test and train extras, torch pinned to the
#   CPU build through constraints/test.txt
# - horovod 0.28.1 (scripts/build-horovod.sh, wheel cached)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
VENV=${DISTCONSOLE_TEST_VENV:-/opt/distconsole-test/venv}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

packages=(openssh-server openssh-client openmpi-bin libopenmpi-dev cmake g++ tmux iproute2
          slurm-wlm munge  # a real Slurm cluster for tests/integration/test_slurm_jobs.py
          procps psmisc python3-venv python3-dev
          pdsh  # bench/gpus_cli.py compares with it (its smoke test runs in the suite)
          prometheus)  # a real Prometheus scrapes `distconsole metrics` (test_metrics_endpoint.py)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p /run/sshd

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
fi
chmod -R a+rX "$(dirname "$VENV")"
echo "setup: installing distconsole[test,train] (torch pinned by constraints/test.txt)"
"$VENV/bin/pip" install -q -c "$here/constraints/test.txt" -e "$here[test,train]" setuptools wheel
if "$VENV/bin/pip" list 2>/dev/null | grep -i '^nvidia-' | grep -vq '^nvidia-ml-py '; then
  echo "setup: CUDA wheels were pulled in; torch is not the local CPU build" >&2
  exit 1
fi
bash "$here/scripts/build-horovod.sh"
# Ray for the ray kind's tests (tests/integration/test_ray.py): the test hosts' setup line
# activates this venv, so `ray` must be in it. Only adds packages (torch, numpy and the
# rest stay as they are; pip check is clean); ~35 s and ~400 MB the first time, skipped
# (a metadata read, ~0.2 s) once the pinned version is there.
RAY_VERSION=$(sed -n 's/^ray==//p' "$here/constraints/test.txt")
if [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ray"))' 2>/dev/null)" != "$RAY_VERSION" ]; then
  echo "setup: installing ray[default]==$RAY_VERSION"
  "$VENV/bin/pip" install -q -c "$here/constraints/test.txt" "ray[default]==$RAY_VERSION"
fi
chmod -R a+rX "$(dirname "$VENV")"
echo "setup: done"
