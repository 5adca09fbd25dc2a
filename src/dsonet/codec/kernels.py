"""The codec's vector kernels, the one door other layers use to reach them.

The C extension (`_kernels.c`: fused BitDelta passes, the rotation's fast transform, the code
index's lookup-table scans, DeltaSoup's weighted distances; AVX2 chosen at run time) is used
where it was built; elsewhere (another architecture, no compiler, DSONET_NO_KERNELS=1 at build
time) the same functions run in numpy (`_numpy_kernels`), with the same numbers. ``BACKEND``
says which: "avx2", "scalar" or "numpy".
"""

from __future__ import annotations

try:
    from dsonet.codec import _kernels as _impl
except ImportError:  # not built here: see setup.py
    from dsonet.codec import _numpy_kernels as _impl

quantize = _impl.quantize
dequantize = _impl.dequantize
rotate = _impl.rotate
unrotate = _impl.unrotate
lut_sums = _impl.lut_sums
int8_dot = _impl.int8_dot
weighted_l1 = _impl.weighted_l1
BACKEND: str = _impl.simd()

__all__ = ["BACKEND", "dequantize", "int8_dot", "lut_sums", "quantize", "rotate", "unrotate", "weighted_l1"]
