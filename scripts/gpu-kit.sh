#!/usr/bin/env bash
# Makes the kit that scripts/gpu-check.sh runs on a GPU machine, which has torch and CMake but no package manager
# and no network: ddprun, and ddprun-train built here with CUDA and NCCL against the project's torch 2.x (the same
# version as the GPU machines'), each finding the shared libraries a bare image lacks in the kit's lib/ (RPATH
# $ORIGIN/../lib); Fashion-MNIST; a manifest. About 40 MB, under the 64 MiB that travels to a lent machine.
#
#   scripts/gpu-kit.sh [KIT]    (default build-gpu-kit; the objects are built in build-gpu-kit-obj)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch2.sh
KIT=${1:-build-gpu-kit}
OBJ=build-gpu-kit-obj
if [ ! -x "$DDPRUN_TORCH2_PYTHON" ]; then
  echo "gpu-kit: no torch $DDPRUN_TORCH2_VERSION at $DDPRUN_TORCH2_VENV; run scripts/setup.sh" >&2
  exit 1
fi
torch_prefix=$("$DDPRUN_TORCH2_PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
torch_lib=$("$DDPRUN_TORCH2_PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
torch_version=$("$DDPRUN_TORCH2_PYTHON" -c 'import torch; print(torch.__version__)')
# The same compile flags as the default preset (ccache hits); a DT_RPATH, which also serves the libraries' own needs.
# CMAKE_LIBRARY_PATH: Torch's config searches the system's directories before its own, where Debian's libtorch 1.13
# (libtorch-dev) would be found first.
mkdir -p "$OBJ"
cmake -S . -B "$OBJ" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_WERROR=ON -DBUILD_TESTING=OFF -DDDPRUN_BUILD_TRAINER=ON \
  -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DCMAKE_LIBRARY_PATH="$torch_lib" -DCMAKE_CUDA_COMPILER="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}" \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >"$OBJ/configure.log" 2>&1 ||
  { tail -30 "$OBJ/configure.log" >&2; exit 1; }
grep -q "NCCL backend enabled" "$OBJ/configure.log" ||
  { echo "gpu-kit: the trainer was not configured with CUDA and NCCL; see $OBJ/configure.log" >&2; exit 1; }
cmake --build "$OBJ" -j"$(nproc)" --target ddprun ddprun-train

rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib" "$KIT/data"
cp "$OBJ/launcher/ddprun" "$OBJ/examples/train/ddprun-train" "$KIT/bin/"
strip --strip-unneeded "$KIT/bin/ddprun" "$KIT/bin/ddprun-train"
# Libraries a bare image lacks: everything but the C runtime, the C++ runtime (the image's own, which torch needs
# too), CUDA's driver and what torch's wheel brings (torch/lib, nvidia/...).
for b in "$KIT/bin/ddprun" "$KIT/bin/ddprun-train"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libutil.so* | ld-linux* | libstdc++.so* | libgcc_s.so* | \
      libcuda.so* | libtorch* | libc10* | libcudart* | libnvrtc* | libnccl* | libcublas* | libcudnn* | libcu* | \
      libnv* | libgomp* | libshm* | libcaffe2*) ;;
    *) case "$path" in "$DDPRUN_TORCH2_VENV"/*) ;; *) cp -L "$path" "$KIT/lib/$name" ;; esac ;;
  esac
done
cp /usr/share/datasets/fashion-mnist/*.gz "$KIT/data/"
glibc=$(objdump -T "$KIT"/bin/* "$KIT"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "ddprun: $("$KIT/bin/ddprun" --version 2>&1 | head -1)"
  echo "torch: $torch_version"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), needs $glibc or newer"
  echo "libs: $(ls "$KIT/lib" | tr '\n' ' ')"
} >"$KIT/manifest.txt"
cat "$KIT/manifest.txt"
du -sh "$KIT"
