"""The codec's rotation in torch, so a loss can see the exact code the default profile sends.

`dsonet.codec.rotation.Rotation` applies R = (Q_m ⊗ H_n)·D to each group (C kernels, numpy);
this is the same map, differentiable: scale by the random signs D and 1/√n, a Walsh–Hadamard
transform of each of the m rows of n = 2^k coordinates, then Q_m mixes the rows. Sylvester's
H_n = H_a ⊗ H_c (n = a·c), so a row viewed as an (a, c) matrix Z transforms as H_a Z H_c: two
small matmuls, ~40x fewer flops than one dense H_n and faster than butterflies in torch. It reads
the signs and Q from the codec's own `get_rotation`, so the two agree to float rounding
(tested), and only the whole-vector case (g = d, the default profile) is needed here.
"""

from __future__ import annotations

import torch

from dsonet.codec.rotation import get_rotation


class TorchRotation(torch.nn.Module):
    """y = R x for rows of x (B, d), the codec's rotation of seed ``seed`` with one block (g = d)."""

    def __init__(self, dim: int, seed: int):
        super().__init__()
        rotation = get_rotation(dim, seed, dim)
        self.m, a, c = rotation.shape
        self.n = a * c  # the Hadamard length, 2^k
        self.register_buffer("signs", torch.from_numpy(rotation.signs.copy()) / self.n**0.5)  # (d,) D / √n
        self.register_buffer("q", torch.from_numpy(rotation.q.copy()))  # (m, m)
        self.register_buffer("h_a", _hadamard(a))  # (a, a) unnormalised, symmetric
        self.register_buffer("h_c", _hadamard(c))  # (c, c)
        self.a, self.c = a, c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        z = (x * self.signs).reshape(b * self.m * self.a, self.c) @ self.h_c  # (B·m·a, c): one GEMM for Z H_c
        z = self.h_a @ z.reshape(b * self.m, self.a, self.c)  # (B·m, a, c)   H_a Z H_c = H_n z per row
        return (self.q @ z.reshape(b, self.m, self.n)).reshape(b, -1)  # (B, d)   row j = Σ_i Q[j, i] z_i


def _hadamard(n: int) -> torch.Tensor:
    """Sylvester's H_n (n a power of two), the order the codec's FWHT uses."""
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    return h
