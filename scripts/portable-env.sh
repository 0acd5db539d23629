# Sourced by the scripts: where the portable build's tools live (docs/install.md, "Building the portable binary").
# One pinned set of PyPI packages (scripts/portable-requirements.txt: zig, scikit-build-core, auditwheel, uv) in a
# virtual environment of its own outside the clone, shared by every clone on the machine; scripts/setup.sh installs
# it, and the Debian bullseye chroot that scripts/portable-check.sh runs the binary in.
DDPRUN_PORTABLE_TAG=zig0.17.1-1
DDPRUN_PORTABLE_CACHE=${DDPRUN_PORTABLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun}
DDPRUN_PORTABLE_VENV=${DDPRUN_PORTABLE_VENV:-$DDPRUN_PORTABLE_CACHE/portable-$DDPRUN_PORTABLE_TAG}
DDPRUN_PORTABLE_PYTHON=$DDPRUN_PORTABLE_VENV/bin/python3
# zig's own cache (libc++, glibc's stubs for 2.28, built once per target) is zig's default, ~/.cache/zig: the same
# for scripts/package.sh and a build from the portable-* presets, and shared by the clones.
# Debian 11 (glibc 2.31, GCC 10's libstdc++), debootstrap'ed once.
DDPRUN_BULLSEYE_ROOT=${DDPRUN_BULLSEYE_ROOT:-$DDPRUN_PORTABLE_CACHE/bullseye-root}
