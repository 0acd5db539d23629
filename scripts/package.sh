#!/usr/bin/env bash
# Builds the portable artifacts into dist/ (docs/install.md, "Artifacts"): for x86_64 and aarch64,
#   ddprun-VERSION-py3-none-manylinux_2_28_ARCH.whl   the binary as the wheel's script (pip puts it on PATH)
#   ddprun-VERSION-linux-ARCH.tar.gz (+ .sha256)       ddprun, LICENSE, ddprun.1, a README
# One build per architecture, by the wheel's backend (scikit-build-core through `python -m build`, in
# build-portable/ARCH, cached by ccache), tagged manylinux_2_28 and checked so by `auditwheel show`; the tarball
# packs the same binary. DDPRUN_PORTABLE_ARCHS="x86_64" builds one architecture only.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/portable-env.sh
# ccache hits across clones in different directories (as scripts/test.sh sets it).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
if [ ! -x "$DDPRUN_PORTABLE_PYTHON" ]; then
  echo "package: the portable build's tools are not installed ($DDPRUN_PORTABLE_VENV): run scripts/setup.sh" >&2
  exit 1
fi
read -r -a archs <<<"${DDPRUN_PORTABLE_ARCHS:-x86_64 aarch64}"
version=$(sed -n 's/^project(ddprun VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
mkdir -p dist build-portable
for arch in "${archs[@]}"; do
  case "$arch" in x86_64 | aarch64) ;; *)
    echo "package: DDPRUN_PORTABLE_ARCHS: '$arch' is not x86_64 or aarch64" >&2
    exit 2
    ;;
  esac
  build=build-portable/$arch
  raw=$build/wheel-raw
  rm -rf "$raw" dist/ddprun-"$version"-*"$arch"*
  echo "package: $arch: building (zig, glibc 2.28) in $build"
  # No build isolation: the backend and zig come from the pinned venv, and nothing downloads. The wheel's platform
  # tag is the floor we promise, manylinux_2_28 (glibc 2.28, PyTorch's), given to the backend as the target's
  # platform (_PYTHON_HOST_PLATFORM): `auditwheel repair` cannot retag a wheel of another architecture than the
  # machine's, and there is nothing to graft (the binary NEEDs only glibc).
  DDPRUN_ZIG_ARCH=$arch _PYTHON_HOST_PLATFORM=manylinux_2_28_$arch \
    "$DDPRUN_PORTABLE_PYTHON" -m build --wheel --no-isolation --outdir "$raw" \
    -C build-dir="$build" -C build.verbose=false >"$build.log" 2>&1 || {
    tail -40 "$build.log" >&2
    echo "package: $arch: the build failed (whole log: $build.log)" >&2
    exit 1
  }
  wheel=ddprun-$version-py3-none-manylinux_2_28_$arch.whl
  # auditwheel's verdict: manylinux_2_28 or a lower level (more systems), else the wheel is not what its tag says.
  "$DDPRUN_PORTABLE_VENV/bin/auditwheel" show "$raw/$wheel" >"$build.auditwheel.log" 2>&1 || true
  level=$(tr '\n' ' ' <"$build.auditwheel.log" |
    sed -n "s/.*consistent with the following platform tag: \"manylinux_2_\([0-9]*\)_$arch\".*/\1/p")
  if [ -z "$level" ] || [ "$level" -gt 28 ]; then
    cat "$build.auditwheel.log" >&2
    echo "package: $arch: the wheel is not manylinux_2_28" >&2
    exit 1
  fi
  mv "$raw/$wheel" dist/
  # The tarball: the same binary, stripped at link time.
  name=ddprun-$version-linux-$arch
  stage=$build/$name
  rm -rf "$stage"
  mkdir -p "$stage"
  cp "$build/launcher/ddprun" "$stage/ddprun"
  cp LICENSE "$stage/"
  cp docs/ddprun.1 "$stage/"
  printf '%s\n' "ddprun $version for Linux $arch with glibc 2.28 or later (RHEL 8+, SLES 15, Ubuntu 20.04+): no root, nothing to build." \
    "Put ddprun on PATH (and ddprun.1 on MANPATH); ddprun --version says which optional libraries it found." \
    "Documentation: docs/install.md and docs/slurm.md of the source; license: LICENSE (BSD-3-Clause)." >"$stage/README"
  tar -C "$build" --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-0}" --sort=name \
    -czf "dist/$name.tar.gz" "$name"
  (cd dist && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
done
echo "package: dist/:"
ls -l dist/
