"""Build guard for BitDelta's C kernels (src/dsonet/codec/_kernels.c); everything else is in pyproject.toml.

The kernels are plain C against Python's own headers; their AVX2 paths are chosen at run time.
They are built only where they can be: on x86-64, unless DSONET_NO_KERNELS=1, and a failed
compile (no compiler, no headers) is a warning, not a failed install. Without them the codec
runs its portable numpy paths (`dsonet.codec.kernels`).
"""

import os
import platform

from setuptools import Extension, setup

X86_64 = platform.machine().lower() in ("x86_64", "amd64")
WANTED = X86_64 and os.environ.get("DSONET_NO_KERNELS", "") in ("", "0")

setup(ext_modules=[Extension("dsonet.codec._kernels", ["src/dsonet/codec/_kernels.c"],
                             extra_compile_args=["-O3", "-std=c11"], optional=True)] if WANTED else [])
