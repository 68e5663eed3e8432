"""Builds the `hawser` extension module with CMake for `pip install .`.

The module is the CMake target hawser_py. Which build directory:
  - $HAWSER_CMAKE_BUILD_DIR when set (configured there if it is not yet);
  - else ./build when it is configured for this Python with the binding on
    (the README's build: nothing is compiled twice);
  - else ./build-pip-<python tag>, configured Release without tests (ccache,
    where installed, reuses what other builds of this tree compiled).
$HAWSER_BUILD_JOBS sets the parallel jobs (default: every CPU).
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(HERE, "CMakeLists.txt")) as f:
        m = re.search(r"project\(hawser VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: no 'project(hawser VERSION x.y.z)'")
    return m.group(1)


def cache_value(build_dir, key):
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def same_python(build_dir):
    exe = cache_value(build_dir, "Python3_EXECUTABLE")
    return exe is not None and os.path.realpath(exe) == os.path.realpath(sys.executable)


def build_dir():
    explicit = os.environ.get("HAWSER_CMAKE_BUILD_DIR")
    if explicit:
        return os.path.abspath(explicit)
    default = os.path.join(HERE, "build")
    if cache_value(default, "HAWSER_WITH_PYTHON") in ("ON", "TRUE", "1") and same_python(default):
        return default
    return os.path.join(HERE, "build-pip-" + sys.implementation.cache_tag)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        bdir = build_dir()
        if not os.path.isfile(os.path.join(bdir, "CMakeCache.txt")):
            cmd = ["cmake", "-S", HERE, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release", "-DHAWSER_BUILD_TESTS=OFF",
                   "-DHAWSER_WITH_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                cmd += ["-G", "Ninja"]
            subprocess.check_call(cmd)
        jobs = os.environ.get("HAWSER_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", bdir, "--target", "hawser_py", "-j", jobs])
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(bdir, "python", "hawser" + suffix)
        if not os.path.isfile(built):
            raise RuntimeError(f"the CMake build made no {built} (a build for another Python?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)


setup(
    version=project_version(),
    ext_modules=[Extension("hawser", sources=[])],
    # The module is the extension alone: no Python packages (the tree's src/
    # is C++, not a src-layout package).
    packages=[],
    py_modules=[],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
