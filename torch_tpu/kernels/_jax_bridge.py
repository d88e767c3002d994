"""Lazy access to JAX: importing torch_tpu never imports jax; the first kernel that needs it
does, with a clear error when it is not installed. Also dtype mapping and CPU execution."""

import contextlib

import torch


class JaxNotInstalledError(ImportError):
    pass


def jax():
    try:
        import jax as _jax
    except ImportError as e:
        raise JaxNotInstalledError(
            "torch_tpu.kernels.jax_op needs JAX: pip install jax (CPU wheels are enough; "
            "jax==0.10.2 is the tested version)") from e
    return _jax


def jax_dtype(dtype):
    import numpy as np
    j = jax()
    table = {
        torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
        torch.bfloat16: j.numpy.bfloat16, torch.int64: np.int64, torch.int32: np.int32,
        torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
    }
    if dtype not in table:
        raise TypeError(f"dtype {dtype} has no JAX equivalent supported by torch_tpu kernels")
    return np.dtype(table[dtype])


def torch_dtype(jdtype):
    import numpy as np
    d = np.dtype(jdtype)
    for t in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool):
        if jax_dtype(t) == d:
            return t
    raise TypeError(f"JAX dtype {d} has no torch dtype supported on tpu")


def x64_scope(dtypes):
    """JAX's x64 mode while tracing when an input is 64-bit, so int64/float64 inputs keep their
    dtype (JAX would silently narrow them to 32 bits otherwise)."""
    wide = any(t in (torch.float64, torch.int64) for t in dtypes)
    return jax().enable_x64(True) if wide else contextlib.nullcontext()


def to_jax(t):
    """A CPU tensor as a JAX array (through numpy; bfloat16 through its bits)."""
    import numpy as np
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy().view(jax_dtype(torch.bfloat16))
    else:
        arr = t.numpy()
    j = jax()
    return j.device_put(np.asarray(arr), j.devices("cpu")[0])


def from_jax(a):
    import numpy as np
    arr = np.array(a)  # a writable host copy
    if arr.dtype == jax_dtype(torch.bfloat16):
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
