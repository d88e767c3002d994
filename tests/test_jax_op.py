"""Custom kernels from JAX / Pallas / StableHLO text (torch_tpu.kernels): results and gradients
against PyTorch on the CPU in Strict, Fused and compiled mode, the one compilation cache (memory
and disk tiers), JAX staying optional, and clear errors for bad kernels and inputs."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401  (registers the tpu device)
from helpers import assert_close
from torch_tpu.execution_mode import mode

jax = pytest.importorskip("jax", reason="the JAX kernel tests need jax (pip install jax==0.10.2)")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402

from torch_tpu.kernels import KernelPlatformError, KernelTraceError, jax_op, stablehlo_op  # noqa: E402
from torch_tpu.kernels.pallas_attention import attention as flash_attention  # noqa: E402

MODES = ["strict", "fused", "compiled"]


@jax_op("jaxtest::gelu_mul")
def gelu_mul(x, y):
    return jax.nn.gelu(x, approximate=True) * y


@jax_op("jaxtest::rms_matmul", static_argnames=("eps",))
def rms_matmul(x, g, w, eps=1e-6):
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g
    return y @ w


def torch_rms_matmul(x, g, w, eps=1e-6):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g) @ w


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


@jax_op("jaxtest::blocked_softmax", static_argnames=("block",))
def blocked_softmax(x, block=4):
    rows, cols = x.shape
    spec = pl.BlockSpec((block, cols), lambda i: (i, 0))
    return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows // block,),
                          in_specs=[spec], out_specs=spec, interpret=True)(x)


def run_in(run_mode, fn, *args, backward=False):
    """fn(*args) in Strict or Fused eager mode, or compiled with torch.compile(backend="tpu")
    without graph breaks (fullgraph=True). With backward, fn returns (out, loss) and
    loss.backward() runs in the same mode (the compiled backward graph when compiled)."""
    if run_mode == "compiled":
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="tpu", fullgraph=True)
        run_mode = "strict"
    with mode(run_mode):
        out = fn(*args)
        if backward:
            out, loss = out
            loss.backward()
        torch.tpu.synchronize()
        return out


def leaf_pair(*tensors):
    """(tpu leaf copies, CPU leaf copies) that require grad."""
    return ([t.to("tpu").requires_grad_() for t in tensors], [t.clone().requires_grad_() for t in tensors])


@pytest.mark.parametrize("run_mode", MODES)
def test_elementwise_kernel(run_mode, no_fallback):
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    (xt, yt), (xc, yc) = leaf_pair(x, y)

    def step(a, b):
        out = gelu_mul(a, b)
        return out, (out * out).sum()

    out = run_in(run_mode, step, xt, yt, backward=True)
    ref = F.gelu(xc, approximate="tanh") * yc
    (ref * ref).sum().backward()
    assert_close(out.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
    assert_close(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)
    assert_close(yt.grad, yc.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("run_mode", MODES)
def test_fused_rmsnorm_matmul(run_mode, no_fallback):
    torch.manual_seed(0)
    x, g, w = torch.randn(4, 16), torch.randn(16), torch.randn(16, 8)
    (xt, gt, wt), (xc, gc, wc) = leaf_pair(x, g, w)

    def step(a, b, c):
        out = rms_matmul(a, b, c, eps=1e-5)
        return out, out.square().mean()

    out = run_in(run_mode, step, xt, gt, wt, backward=True)
    ref = torch_rms_matmul(xc, gc, wc, eps=1e-5)
    ref.square().mean().backward()
    assert_close(out.detach(), ref.detach(), rtol=1e-4, atol=1e-5)
    for t, c in ((xt, xc), (gt, gc), (wt, wc)):
        assert_close(t.grad, c.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("run_mode", MODES)
def test_pallas_flash_attention(run_mode, no_fallback):
    torch.manual_seed(0)
    q, k, v, w = (torch.randn(1, 2, 16, 8) for _ in range(4))
    (qt, kt, vt), (qc, kc, vc) = leaf_pair(q, k, v)
    wt = w.to("tpu")

    def step(a, b, c, weight):
        out = flash_attention(a, b, c, block_q=8, block_k=8)
        return out, (out * weight).sum()

    out = run_in(run_mode, step, qt, kt, vt, wt, backward=True)
    ref = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True)
    (ref * w).sum().backward()
    assert_close(out.detach(), ref.detach(), rtol=1e-4, atol=1e-5)
    for t, c in ((qt, qc), (kt, kc), (vt, vc)):
        assert_close(t.grad, c.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("run_mode", MODES)
def test_pallas_blocked_softmax(run_mode, no_fallback):
    x = torch.randn(8, 12)
    out = run_in(run_mode, lambda a: blocked_softmax(a, block=4) * 2, x.to("tpu"))
    assert_close(out, torch.softmax(x, -1) * 2, rtol=1e-5, atol=1e-6)


def test_pallas_without_vjp_names_the_fix():
    x = torch.randn(8, 12, device="tpu", requires_grad=True)
    out = blocked_softmax(x, block=4).sum()
    with pytest.raises(KernelTraceError, match="(?s)jaxtest::blocked_softmax.*custom_vjp"):
        out.backward()


def test_second_call_hits_the_memory_tier():
    x, y = torch.randn(7, 3, device="tpu"), torch.randn(7, 3, device="tpu")
    op = gelu_mul.jax_op
    gelu_mul(x, y)
    torch.tpu.synchronize()
    lowered, before = op.lowerings, torch.tpu.compilation_cache_stats()
    out = gelu_mul(x, y)
    torch.tpu.synchronize()
    after = torch.tpu.compilation_cache_stats()
    assert op.lowerings == lowered  # traced once per signature
    assert after["compiles"] == before["compiles"] and after["disk_loads"] == before["disk_loads"]
    assert after["hits"] > before["hits"]
    assert_close(out, F.gelu(x.cpu(), approximate="tanh") * y.cpu())
    gelu_mul(torch.randn(2, 3, device="tpu"), torch.randn(2, 3, device="tpu"))  # a new shape: lowered again
    assert op.lowerings == lowered + 1


CHILD = r"""
import json, torch, torch_tpu, jax
from torch_tpu.kernels import jax_op
@jax_op("child::k")
def k(x):
    return jax.numpy.sin(x) * 3 + x
x = torch.arange(12.0).reshape(3, 4)
y = k(x.to("tpu"))
print(json.dumps({"y": y.cpu().tolist(), "stats": torch.tpu.compilation_cache_stats()}))
"""


def test_disk_tier_across_processes(tmp_path):
    def child():
        env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(tmp_path)}
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    first, second = child(), child()
    expected = torch.sin(torch.arange(12.0).reshape(3, 4)) * 3 + torch.arange(12.0).reshape(3, 4)
    for run in (first, second):
        torch.testing.assert_close(torch.tensor(run["y"]), expected, rtol=1e-5, atol=1e-5)
    assert first["stats"]["compiles"] >= 1 and first["stats"]["disk_writes"] >= 1
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_loads"] >= 1


def test_pytrees_static_args_and_several_outputs(no_fallback):
    @jax_op("jaxtest::tree", static_argnums=(1,))
    def tree(params, power, scale=2.0):
        a, b = params["a"], params["b"]
        return {"sum": (a + b) ** power * scale, "parts": (a.max(), b.astype(jnp.int32))}

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = tree({"a": a.to("tpu"), "b": b.to("tpu")}, 2, scale=0.5)
    assert_close(out["sum"], (a + b) ** 2 * 0.5)
    assert_close(out["parts"][0], a.max())
    assert_close(out["parts"][1], b.to(torch.int32))
    out3 = tree({"a": a.to("tpu"), "b": b.to("tpu")}, 3)
    assert_close(out3["sum"], (a + b) ** 3 * 2.0, rtol=1e-5, atol=1e-5)


def test_dtypes_are_kept_without_promotion():
    @jax_op("jaxtest::dt")
    def dt(i, h, l):
        return i * 2, h * h, l + 1

    i = torch.arange(6, dtype=torch.int32)
    h = torch.randn(6).to(torch.bfloat16)
    l = torch.arange(6, dtype=torch.int64) + 2**40
    oi, oh, ol = dt(i.to("tpu"), h.to("tpu"), l.to("tpu"))
    assert_close(oi, i * 2)
    assert_close(oh, h * h)
    assert_close(ol, l + 1)  # int64 beyond 32 bits survives (traced with JAX's x64 mode)


def test_cpu_tensors_run_jax_on_the_cpu():
    x, g, w = torch.randn(4, 16), torch.randn(16), torch.randn(16, 8)
    out = rms_matmul(x, g, w)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, torch_rms_matmul(x, g, w), rtol=1e-4, atol=1e-5)


def test_user_backward_wins():
    @jax_op("jaxtest::user_bwd")
    def square(x):
        return x * x

    square.register_autograd(lambda ctx, grads: [grads[0] * 0 + 7])
    x = torch.randn(5, device="tpu", requires_grad=True)
    square(x).sum().backward()
    assert_close(x.grad, torch.full((5,), 7.0))


STABLEHLO = """
module @m {
  func.func public @main(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>) {
    %0 = stablehlo.multiply %x, %y : tensor<2x3xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    return %0, %1 : tensor<2x3xf32>, tensor<3xf32>
  }
}
"""


@pytest.mark.parametrize("run_mode", MODES)
def test_stablehlo_text_kernel(run_mode, no_fallback):
    mul_sum = stablehlo_op("jaxtest::mul_sum_" + run_mode, STABLEHLO, [((2, 3), torch.float32), ((3,), torch.float32)])
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    prod, total = run_in(run_mode, lambda a, b: tuple(o + 1 for o in mul_sum(a, b)), x.to("tpu"), y.to("tpu"))
    assert_close(prod, x * y + 1)
    assert_close(total, (x * y).sum(0) + 1)


def test_stablehlo_text_kernel_checks_its_inputs():
    mul_sum = stablehlo_op("jaxtest::mul_sum_checked", STABLEHLO)
    with pytest.raises(TypeError, match="jaxtest::mul_sum_checked"):
        mul_sum(torch.randn(3, 3, device="tpu"), torch.randn(3, 3, device="tpu"))
    with pytest.raises(ValueError, match="out_specs"):
        stablehlo_op("jaxtest::bad_specs", STABLEHLO, [((2, 3), torch.float32)])
    with pytest.raises(RuntimeError, match="only on tpu tensors"):
        mul_sum(torch.randn(2, 3), torch.randn(2, 3))


def test_bad_kernels_give_clear_errors():
    @jax_op("jaxtest::value_shape")
    def value_shape(x):
        return jnp.zeros(int(x.sum()))

    with pytest.raises(KernelTraceError, match="(?s)jaxtest::value_shape.*static_arg"):
        value_shape(torch.ones(3, device="tpu"))

    @jax_op("jaxtest::no_array")
    def no_array(x):
        return "not an array"

    with pytest.raises(KernelTraceError, match="jaxtest::no_array"):
        no_array(torch.ones(3, device="tpu"))

    with pytest.raises(ValueError, match="donate_argnums"):  # donation itself: test_jax_op_aliasing.py
        jax_op("jaxtest::donating", lambda x: x + 1, donate_argnums=("x",))
    with pytest.raises(RuntimeError, match="jaxtest::gelu_mul: inputs must all be tpu tensors or all CPU"):
        gelu_mul(torch.ones(2, device="tpu"), torch.ones(2))
    with pytest.raises(ValueError, match="mylib::name"):
        jax_op("no_namespace", lambda x: x)


def test_mosaic_kernel_on_the_cpu_plugin_is_refused():
    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    # Lowered for TPU (a Mosaic custom call), which the XLA CPU plugin cannot run.
    @jax_op("jaxtest::mosaic", platform="tpu")
    def mosaic(x):
        return pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    with pytest.raises(KernelPlatformError, match="(?s)tpu_custom_call.*interpret=True"):
        mosaic(torch.ones(8, 128, device="tpu"))


def test_torch_tpu_import_does_not_import_jax_and_names_pip():
    code = r"""
import sys, torch, torch_tpu, torch_tpu.kernels
assert torch.tpu.pallas.custom_jax_kernel is torch.tpu.pallas.jax_op is torch_tpu.kernels.jax_op
assert "jax" not in sys.modules, "importing torch_tpu imported jax"
sys.modules["jax"] = None  # as if JAX were not installed
op = torch.tpu.pallas.jax_op("nojax::f")(lambda x: x)
try:
    op(torch.ones(2, device="tpu"))
except torch_tpu.kernels.JaxNotInstalledError as e:
    assert "pip install jax" in str(e), e
    print("OK")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


def test_llama_example_with_pallas_attention(capsys):
    """examples/llama_pallas_attention.py: the loss falls and matches the SDPA model's."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import llama_pallas_attention

    assert llama_pallas_attention.main(["--steps", "6", "--tol", "1e-3"]) == 0
    assert "cpu_fallbacks=0" in capsys.readouterr().out


def test_a_jax_op_passed_straight_to_torch_compile(fresh_dynamo):
    """torch.compile(my_jax_op): the decorated function is the compiled frame itself (it used to
    fail in fake tracing with KeyError '0'); a second shape specializes a new graph (the kernel
    is traced for concrete shapes) instead of failing on symbolic sizes."""
    compiled = torch.compile(gelu_mul, backend="tpu")
    for rows in (4, 6, 9):
        x, y = torch.randn(rows, 8), torch.randn(rows, 8)
        got = compiled(x.to("tpu"), y.to("tpu"))
        assert_close(got, F.gelu(x, approximate="tanh") * y, rtol=1e-5, atol=1e-5)
