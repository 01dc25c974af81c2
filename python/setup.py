# SPDX-License-Identifier: Apache-2.0
"""Build hook of the kvtier binding (the metadata is in pyproject.toml): the
built package gets kvtier/_libpath.py, naming the libkvtier-client the build
found, so that `import kvtier` loads it with no PYTHONPATH or
LD_LIBRARY_PATH. Looked for, in order: $KVTIER_CLIENT_LIB; the libdir of
pkg-config's kvtier-client (an installed kvtier, e.g. with PKG_CONFIG_PATH
naming a staging prefix); the release build of the source checkout this
directory belongs to. Finding none is fine: the loader's path is tried at
import."""

import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

SONAME = "libkvtier-client.so.0"


def found_libraries():
    found = []
    env = os.environ.get("KVTIER_CLIENT_LIB")
    if env and os.path.exists(env):
        found.append(os.path.abspath(env))
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "kvtier-client"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, check=True).stdout.strip()
        if libdir and os.path.exists(os.path.join(libdir, SONAME)):
            found.append(os.path.join(libdir, SONAME))
    except (OSError, subprocess.CalledProcessError):
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(os.path.dirname(here), "build", "release", "transport", SONAME)
    if os.path.exists(tree):
        found.append(tree)
    return found


class BuildPyWithLibpath(build_py):
    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "kvtier", "_libpath.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py: the libkvtier-client this package was '
                    'built against."""\n')
            f.write("LIBRARIES = %r\n" % (found_libraries(),))


setup(cmdclass={"build_py": BuildPyWithLibpath})
