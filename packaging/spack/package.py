# Spack recipe for ddprun (docs/install.md, "From source"). Copy into a Spack repository of your own as
# packages/ddprun/package.py; `spack install ddprun`, `spack install ddprun+trainer`.
#
# How far it was tested (2026-11): its Python parses, and the CMake options it sets are the ones this repository's
# CMakeLists.txt reads (DDPRUN_WITH_MUNGE, DDPRUN_BUILD_TRAINER, BUILD_TESTING, DDPRUN_WITH_CCACHE,
# DDPRUN_GIT_REVISION; a configure with them passes on Debian). Not tested: a real `spack install` (no Spack
# here), the dependency versions beyond Debian bookworm's (Boost 1.81, fmt 9.1, CLI11 2.1, hwloc 2.9), and the
# homepage/git URLs, placeholders until the project has a public home.
from spack.package import *


class Ddprun(CMakePackage):
    """Slurm-native distributed launcher for PyTorch-style training, compatible with torchrun: one agent per
    node, a rendezvous store on node 0, fail-fast supervision, elastic jobs, `ddprun top` and `ddprun stacks`."""

    homepage = "https://example.invalid/ddprun"
    git = "https://example.invalid/ddprun.git"

    license("BSD-3-Clause", checked_by="the ddprun developers")

    version("main", branch="main")

    # libmunge and libhwloc are loaded at run time (dlopen) when present; these variants make Spack bring them,
    # and Spack's RPATH on the binary is where ddprun finds them.
    variant("munge", default=True, description="MUNGE authentication (--rdzv-auth munge) with Spack's munge")
    variant("hwloc", default=True, description="--cpu-bind, with Spack's hwloc at run time")
    variant("trainer", default=False, description="ddprun-train, the bundled libtorch DDP trainer")

    depends_on("cxx", type="build")
    depends_on("c", type="build")
    depends_on("cmake@3.25:", type="build")
    depends_on("boost@1.81:", type="build")  # Asio, header-only
    depends_on("fmt@9:10")  # 9.1 is what the project builds with; fmt 11 changed APIs ddprun uses
    depends_on("cli11@2:", type="build")
    depends_on("nlohmann-json@3:", type="build")
    # hwloc's headers are always needed to build (the types of the topology code); +hwloc also loads it.
    depends_on("hwloc@2:", type="build", when="~hwloc")
    depends_on("hwloc@2:", type=("build", "link", "run"), when="+hwloc")
    depends_on("munge", type=("link", "run"), when="+munge")
    depends_on("openssl", type=("link", "run"))  # libcrypto, for token authentication
    depends_on("catch2@2", type="test")
    depends_on("py-torch", when="+trainer")

    conflicts("%gcc@:10", msg="ddprun needs C++20 (GCC 11 or later)")

    def cmake_args(self):
        return [
            self.define_from_variant("DDPRUN_WITH_MUNGE", "munge"),
            self.define("DDPRUN_BUILD_TRAINER", "ON" if self.spec.satisfies("+trainer") else "OFF"),
            self.define("BUILD_TESTING", self.run_tests),
            self.define("DDPRUN_WITH_CCACHE", "OFF"),
            self.define("DDPRUN_GIT_REVISION", str(self.spec.version)),
        ]
