"""Bucket sizes: shapes are rounded up so a steady stream of requests reuses a few programs.

Every size is a power of two (key windows also take the half steps between, ``fine_bucket``), at
least a floor (so small batches share one program) and at most a cap (the engine's limit). A server compiles one program per distinct bucket combination it
meets; ``docs/design.md`` counts them for the default settings.
"""


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def bucket(n: int, floor: int = 1, cap: int | None = None) -> int:
    """n rounded up to a power of two, at least ``floor`` and at most ``cap`` (when given);
    0 stays 0 (an absent group)."""
    if n <= 0:
        return 0
    size = max(pow2(n), pow2(floor))
    if cap is not None:
        size = min(size, cap)
        if size < n:
            raise ValueError(f"{n} exceeds the largest bucket ({cap})")
    return size


def fine_bucket(n: int, floor: int = 1, cap: int | None = None) -> int:
    """Like ``bucket`` with half steps as well (4, 6, 8, 12, 16, 24, ...): at most a third of a
    bucket is padding, for sizes whose cost grows with the padding (attention key windows)."""
    if n <= 0:
        return 0
    n = max(n, floor)
    p = pow2(n)
    size = p * 3 // 4 if p >= 4 and p * 3 // 4 >= n else p
    if cap is not None:
        size = min(size, cap)
        if size < n:
            raise ValueError(f"{n} exceeds the largest bucket ({cap})")
    return size
