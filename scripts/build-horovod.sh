#!/usr/bin/env bash
# Build horovod 0.28.1 against the installed torch (2.13) and install it into the venv.
#
# 0.28.1 only compiles against torch 2.x headers with C++17, so the sdist's
# CMAKE_CXX_STANDARD (14) is raised to 17. The wheel is cached so a machine builds it
# once (~3.5 min on 2 cores).
set -euo pipefail
VENV=${DISTCONSOLE_TEST_VENV:-/opt/distconsole-test/venv}
CACHE=${DISTCONSOLE_WHEEL_CACHE:-/var/cache/distconsole/wheels}
VERSION=0.28.1
PY="$VENV/bin/python"

if "$PY" -c "import horovod.torch" >/dev/null 2>&1; then
  echo "horovod already installed in $VENV"
  exit 0
fi
mkdir -p "$CACHE"
# horovod's setup.py and horovodrun need these; with --no-build-isolation they must be
# in the venv before the build.
"$PY" -m pip install -q setuptools wheel packaging cffi cloudpickle psutil pyyaml
wheel=$(ls "$CACHE"/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$VERSION" -d "$work"
  tar -xzf "$work"/horovod-"$VERSION".tar.gz -C "$work"
  src="$work/horovod-$VERSION"
  sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt"
  echo "building horovod $VERSION (a few minutes)..."
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-j"$(nproc)" \
    "$PY" -m pip wheel -q --no-build-isolation --no-deps "$src" -w "$work/dist"
  cp "$work"/dist/horovod-*.whl "$CACHE"/
  wheel=$(ls "$CACHE"/horovod-"$VERSION"-*.whl | head -n 1)
fi
"$PY" -m pip install -q --no-deps "$wheel"
"$VENV/bin/horovodrun" --check-build
