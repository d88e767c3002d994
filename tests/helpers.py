"""Shared assertions: every tpu result is compared with the same computation on the CPU."""

import torch

# Tolerances per dtype for results computed by different (but correct) kernels.
_TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-12, 1e-12),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
}


def assert_close(tpu_value, cpu_value, rtol=None, atol=None):
    """`tpu_value` (a tpu tensor) equals `cpu_value` (a CPU tensor): same shape and dtype, values
    within dtype-aware tolerances (exact for integers and bool)."""
    assert isinstance(tpu_value, torch.Tensor) and tpu_value.device.type == "tpu", tpu_value
    assert cpu_value.device.type == "cpu"
    assert tpu_value.dtype == cpu_value.dtype, (tpu_value.dtype, cpu_value.dtype)
    assert tpu_value.shape == cpu_value.shape, (tpu_value.shape, cpu_value.shape)
    default_rtol, default_atol = _TOL.get(cpu_value.dtype, (0, 0))
    torch.testing.assert_close(
        tpu_value.cpu(),
        cpu_value,
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
        equal_nan=True,
    )


def run_both(fn, *tensors, device="tpu"):
    """fn applied to CPU tensors and to their tpu copies: (tpu result, cpu result)."""
    on_tpu = [t.to(device) if isinstance(t, torch.Tensor) else t for t in tensors]
    return fn(*on_tpu), fn(*tensors)


def assert_each_call_is_one_program(calls, eager):
    """Each of `calls` (tpu work), once compiled, runs as exactly one program in eager mode
    `eager`, with no new compile."""
    from torch_tpu.execution_mode import mode

    def counts():
        stats = torch.tpu.compilation_cache_stats()
        return stats["executions"], stats["compiles"]

    with mode(eager):
        for call in calls:
            call()  # compiles
            torch.tpu.synchronize()
            executions, compiles = counts()
            call()
            torch.tpu.synchronize()
            assert counts() == (executions + 1, compiles), (counts(), executions, compiles)
