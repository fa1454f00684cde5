"""pip install ./python: builds terngrad_torch with the repository's CMake (the extension links
the terngrad library, so it cannot be built from this folder alone) and installs the package.

The build needs the same things as the CMake build: a C++20 compiler, CMake, the Debian packages
of scripts/setup.sh, and PyTorch with its C++ headers (Debian: python3-torch libtorch-dev). It uses
../build-pip (CPU only: a pip-installed hook needs no CUDA toolkit; a CUDA build is the CMake
build's). TERNGRAD_TORCH_PYTHON names the Python that imports torch when the one running pip
cannot (e.g. inside pip's isolated build environment).
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _torch_python():
    """A Python that imports torch, run outside pip's build isolation."""
    env = _clean_env()
    for py in (os.environ.get("TERNGRAD_TORCH_PYTHON"), sys.executable, "/usr/bin/python3"):
        if py and subprocess.run([py, "-c", "import torch"], env=env,
                                 capture_output=True).returncode == 0:
            return py
    raise SystemExit("terngrad_torch: no Python that imports torch (install PyTorch; Debian: "
                     "apt-get install python3-torch libtorch-dev; or set TERNGRAD_TORCH_PYTHON)")


def _clean_env():
    """The environment without pip's build isolation (which hides the system's site-packages)."""
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME", "PYTHONSAFEPATH"):
        env.pop(k, None)
    return env


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            raise SystemExit("terngrad_torch: build it from a terngrad checkout (pip install ./python)")
        py = _torch_python()
        build = os.path.join(ROOT, "build-pip")
        env = _clean_env()
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DTG_ENABLE_CUDA=OFF", "-DTG_BUILD_TESTS=OFF",
                               "-DTG_BUILD_BENCH=OFF", "-DTG_BUILD_PYTHON=ON",
                               "-DTG_PYTHON=" + py], env=env)
        subprocess.check_call(["cmake", "--build", build, "--target", "terngrad_torch_C",
                               "-j", str(os.cpu_count() or 1)], env=env)
        built = glob.glob(os.path.join(build, "python", "terngrad_torch", "_C*.so"))
        if len(built) != 1:
            raise SystemExit("terngrad_torch: expected one _C*.so in %s, found %s" % (build, built))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    name="terngrad_torch",
    version="0.1.0",
    description="TernGrad DDP communication hook on the terngrad library",
    packages=["terngrad_torch"],
    ext_modules=[Extension("terngrad_torch._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.8",
)
