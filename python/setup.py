"""pip install ./python: builds terngrad_torch with the repository's CMake (the extension links
the terngrad library, so it cannot be built from this folder alone) and installs the package.

CMake is configured with TG_PYTHON_ONLY=ON: only nn/, comm's transport interface (tg_comm_core) and
terngrad/ (tg_terngrad_core) are built beside the extension; torch's ProcessGroup is the transport,
so Gloo, toml++, CLI11, GoogleTest and the other tools' libraries are neither needed nor looked for.
The build needs a C++20 compiler, CMake >= 3.24, OpenBLAS, OpenSSL and nlohmann-json (nn/), the
Python headers, and PyTorch with its C++ package (Debian: python3-torch libtorch-dev pybind11-dev);
README "Using TernGrad from PyTorch" lists the packages.

CUDA: on when the torch that builds it has CUDA (torch.version.cuda) and a CUDA toolkit (nvcc) is
found, else a CPU-only build; TERNGRAD_CUDA=1 or 0 forces it. The CMake build tree is
TERNGRAD_BUILD_DIR (default ../build-pip). TERNGRAD_TORCH_PYTHON names the Python that imports torch
when the one running pip cannot (e.g. inside pip's isolated build environment).
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


def _torch_has_cuda(py, env):
    out = subprocess.run([py, "-c", "import torch; print(torch.version.cuda is not None)"],
                         env=env, capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == "True"


def _nvcc():
    for nvcc in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if nvcc and os.access(nvcc, os.X_OK):
            return nvcc
    return None


def _cuda(py, env):
    """Whether to build the CUDA backend: TERNGRAD_CUDA=0/1, else torch's CUDA and nvcc both."""
    forced = os.environ.get("TERNGRAD_CUDA")
    if forced not in (None, "", "0", "1"):
        raise SystemExit("terngrad_torch: TERNGRAD_CUDA=%r: expected 0 or 1" % forced)
    if forced:
        return forced == "1"
    return _torch_has_cuda(py, env) and _nvcc() is not None


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            raise SystemExit("terngrad_torch: build it from a terngrad checkout "
                             "(pip install ./python)")
        py = _torch_python()
        build = os.path.abspath(os.environ.get("TERNGRAD_BUILD_DIR")
                                or os.path.join(ROOT, "build-pip"))
        env = _clean_env()
        cuda = "ON" if _cuda(py, env) else "OFF"
        print("terngrad_torch: CMake build in %s (CUDA %s, %s)" % (build, cuda, py))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DTG_PYTHON_ONLY=ON", "-DTG_ENABLE_CUDA=" + cuda,
                               "-DTG_PYTHON=" + py], env=env)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", build, "--target", "terngrad_torch_C",
                               "-j", jobs], env=env)
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
