"""The packed matmul kernel (torch_tpu.serving.packed_matmul): on the XLA CPU plugin a host kernel
the plugin calls as a typed FFI custom call, multiplying rows by a weight packed once in column
panels. Every result is compared with F.linear on the CPU."""

import pytest
import torch

import torch_tpu
from helpers import check_host_kernel_switch
from torch_tpu.execution_mode import EagerMode, mode
from torch_tpu.serving import packed_matmul as pm

DEV = "tpu"


def _case(rows, k, n, seed, bias=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g)
    w = torch.randn(n, k, generator=g) / k ** 0.5
    b = torch.randn(n, generator=g) if bias else None
    return x, w, b


def test_the_cpu_plugin_registers_the_kernel():
    assert pm.TARGET in torch_tpu._C._host_kernels()
    assert pm.available()


def test_pack_lays_out_column_panels():
    w = torch.arange(70 * 3, dtype=torch.float32).reshape(70, 3)
    packed = pm.pack(w.to(DEV)).cpu()
    assert packed.shape == (3, 3, 32)  # ceil(70 / 32) panels of K x 32
    assert torch.equal(packed[1, 2, 5], w[32 + 5, 2])
    assert torch.equal(packed[2, :, :6], w[64:].t()) and not packed[2, :, 6:].any()  # zero padding


# Rows around the kernel's 12-row register block (1, one block, a block and a sliver split in two
# halves, several blocks), K = 1 and odd, N a multiple of the panel, below it and past it.
@pytest.mark.parametrize("rows,k,n", [(1, 64, 32), (12, 33, 70), (13, 1, 5), (23, 96, 64), (40, 128, 300),
                                      (300, 48, 33)])
def test_matches_f_linear(rows, k, n, no_fallback):
    x, w, _ = _case(rows, k, n, seed=rows + k + n)
    got = pm.linear(x.to(DEV), pm.pack(w.to(DEV)), n)
    assert got.device.type == "tpu" and got.shape == (rows, n)
    torch.testing.assert_close(got.cpu(), torch.nn.functional.linear(x, w), rtol=1e-5, atol=1e-5)


def test_bias_and_leading_dims():
    x, w, b = _case(2 * 5, 40, 50, seed=3, bias=True)
    x = x.reshape(2, 5, 40)
    got = pm.linear(x.to(DEV), pm.pack(w.to(DEV)), 50, b.to(DEV))
    torch.testing.assert_close(got.cpu(), torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_on_cpu_tensors_and_other_dtypes_the_plain_product_runs():
    x, w, _ = _case(4, 16, 40, seed=5)
    torch.testing.assert_close(pm.linear(x, pm.pack(w), 40), torch.nn.functional.linear(x, w))
    got = pm.linear(x.to(DEV, torch.bfloat16), pm.pack(w.to(DEV)), 40)  # not the kernel's dtype
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu().float(), torch.nn.functional.linear(x, w), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("how", ["fused", "compiled"])
def test_inside_a_fused_graph_and_compiled_code(how, fresh_dynamo):
    x, w, b = _case(8, 64, 96, seed=7, bias=True)

    def step(x, packed, b):
        return torch.relu(pm.linear(x * 2, packed, 96, b)).sum(-1)

    expected = torch.relu(torch.nn.functional.linear(x * 2, w, b)).sum(-1)
    args = (x.to(DEV), pm.pack(w.to(DEV)), b.to(DEV))
    if how == "fused":
        with mode(EagerMode.FUSED):
            got = step(*args)
    else:  # one graph: availability is a constant to Dynamo, the op traces
        got = torch.compile(step, backend="tpu", fullgraph=True)(*args)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-4)


def test_a_mismatched_weight_is_an_error_naming_the_shapes():
    x, w, _ = _case(3, 16, 40, seed=9)
    packed = pm.pack(w.to(DEV))
    with pytest.raises(RuntimeError, match="do not give the result"):
        pm.packed_matmul(x.to(DEV), packed, 200).cpu()
    torch.testing.assert_close(pm.linear(x.to(DEV), packed, 40).cpu(), torch.nn.functional.linear(x, w),
                               rtol=1e-5, atol=1e-5)  # the device goes on working


_DUMP_SCRIPT = """
import json, torch, torch_tpu
from torch_tpu.serving import packed_matmul as pm
x = torch.randn(5, 24); w = torch.randn(40, 24)
out = pm.linear(x.to("tpu"), pm.pack(w.to("tpu")), 40)
print("RESULT " + json.dumps({"available": pm.available(), "diff": float((out.cpu() - x @ w.t()).abs().max())}))
"""


def test_the_program_calls_the_kernel(tmp_path):
    check_host_kernel_switch(tmp_path, _DUMP_SCRIPT, pm.TARGET, 1e-4)


def test_without_host_kernels_the_plain_product_runs(tmp_path):
    check_host_kernel_switch(tmp_path, _DUMP_SCRIPT, pm.TARGET, 1e-4, enabled=False)
