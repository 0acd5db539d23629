# Sourced by the scripts: where the project's torch 2.x lives. One pinned version, in a virtual environment of its
# own outside the clone (so every clone on a machine shares one download), installed by scripts/setup.sh.
# 2.11.0 is the version the project's GPU machines carry (torch 2.11.0+cu130): the CUDA trainer built here runs there.
DDPRUN_TORCH2_VERSION=2.11.0
DDPRUN_TORCH2_VENV=${DDPRUN_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun/torch-$DDPRUN_TORCH2_VERSION}
DDPRUN_TORCH2_PYTHON=$DDPRUN_TORCH2_VENV/bin/python3
