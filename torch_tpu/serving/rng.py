"""Counter-based random numbers for sampling inside a step program.

A replayed program cannot draw from a stateful generator (its seed and offset would change per
call). Instead every random number is a hash of (request seed, output position, vocabulary
index): a request's n-th token always sees the same noise whatever batch it is in, so seeded
requests are reproducible, and a different seed or position gives independent noise. All
arithmetic is on int64 values below 2**32 and never overflows, so the CPU and the device give
bit-identical numbers (tests compare them).
"""

import torch

_M32 = 0xFFFFFFFF
_M16 = 0xFFFF


def _mul32(h: torch.Tensor, c: int) -> torch.Tensor:
    """(h * c) mod 2**32 for h in [0, 2**32) without int64 overflow (16-bit halves)."""
    lo = (h & _M16) * c
    hi = ((h >> 16) * c) & _M16
    return (lo + (hi << 16)) & _M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser: every input bit affects every output bit."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def row_keys(seed_lo: torch.Tensor, seed_hi: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    """One 32-bit key per row from its seed (two 32-bit halves) and counter (int tensors)."""
    m = _M32
    k = _fmix32((seed_lo.long() & m) ^ 0x243F6A88)
    k = _fmix32(k ^ _mul32(seed_hi.long() & m, 0x9E3779B1))
    return _fmix32(k ^ ((_mul32(counter.long() & m, 0x85EBCA77) + 0x165667B1) & m))


def uniform(keys: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, width] float32 uniforms in (0, 1): 24 random bits per number."""
    cols = torch.arange(width, device=keys.device, dtype=torch.int64)
    k = keys.long()[:, None]
    x = (_mul32(cols, 0x9E3779B1)[None, :] + k) & _M32
    x = _fmix32(_fmix32(x) ^ k)
    return ((x >> 8).to(torch.float32) + 0.5) * (1.0 / 16777216.0)


def exponential(keys: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, width] float32 Exp(1) noise (what vLLM's sampler draws with ``exponential_``)."""
    return -torch.log(uniform(keys, width))
