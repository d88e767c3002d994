"""Diffusers on the tpu device: tiny UNets, the DDPM pipeline and a bf16 autocast denoising loop,
each compared with the same computation (same weights, same seeds) on the CPU."""


# Offline: tests/conftest.py sets HF_HUB_OFFLINE and friends for every test and subprocess.

import copy  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402  (registers tpu before diffusers looks for an accelerator)

from diffusers import (  # noqa: E402
    DDIMScheduler,
    DDPMPipeline,
    DDPMScheduler,
    EulerDiscreteScheduler,
    UNet2DConditionModel,
    UNet2DModel,
)
from diffusers.pipelines import pipeline_utils  # noqa: E402
from diffusers.utils import torch_utils  # noqa: E402
from helpers import assert_close  # noqa: E402

_INFERENCE_STEPS = 5


def _tiny_conditional_unet(seed=0):
    torch.manual_seed(seed)
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=8,
        attention_head_dim=2,
        norm_num_groups=4,
    )


def _tiny_unet(seed=0):
    torch.manual_seed(seed)
    return UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
        attention_head_dim=4,
    )


def _tiny_ddpm_pipeline():
    pipe = DDPMPipeline(unet=_tiny_unet(), scheduler=DDPMScheduler(num_train_timesteps=100))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _generate(pipe, seed=7, batch_size=2):
    """Images from a CPU generator: diffusers draws the noise on the CPU and moves it to the device."""
    generator = torch.Generator("cpu").manual_seed(seed)
    return pipe(
        batch_size=batch_size,
        generator=generator,
        num_inference_steps=_INFERENCE_STEPS,
        output_type="np",
    ).images


# --- device discovery ---------------------------------------------------------------------------


def test_diffusers_detects_tpu_accelerator():
    assert torch_utils.get_device() == "tpu"
    assert "tpu" in pipeline_utils.SUPPORTED_DEVICE_MAP
    backend = torch_utils.TorchDeviceBackend("tpu")
    assert backend.device_count() == torch.tpu.device_count() >= 1
    backend.manual_seed(5)
    first = torch.randn(4, device="tpu").cpu()
    backend.manual_seed(5)
    assert torch.equal(torch.randn(4, device="tpu").cpu(), first)
    backend.synchronize()
    backend.empty_cache()
    assert isinstance(backend.max_memory_allocated(), int)


def test_randn_tensor_with_cpu_generator_matches_cpu():
    shape = (3, 4, 5)
    on_tpu = torch_utils.randn_tensor(shape, generator=torch.Generator().manual_seed(11), device="tpu")
    on_cpu = torch_utils.randn_tensor(shape, generator=torch.Generator().manual_seed(11), device="cpu")
    assert_close(on_tpu, on_cpu, rtol=0, atol=0)

    # One generator per batch entry, as pipelines do for per-image seeds.
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    batched = torch_utils.randn_tensor(shape, generator=gens, device=torch.device("tpu"))
    expected = torch.cat(
        [torch.randn((1, 4, 5), generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3)]
    )
    assert_close(batched, expected, rtol=0, atol=0)


def test_randn_tensor_with_tpu_generator_is_reproducible():
    def draw(seed):
        generator = torch.Generator("tpu").manual_seed(seed)
        return torch_utils.randn_tensor((64,), generator=generator, device="tpu")

    first, again, other = draw(3), draw(3), draw(4)
    assert first.device.type == "tpu"
    assert torch.equal(first.cpu(), again.cpu())
    assert not torch.equal(first.cpu(), other.cpu())
    # Same distribution as the CPU's generator (not the same stream).
    cpu_draw = torch.randn(64, generator=torch.Generator().manual_seed(3))
    assert abs(first.cpu().std().item() - cpu_draw.std().item()) < 0.5


def test_randn_tensor_tpu_generator_for_cpu_tensor_raises():
    with pytest.raises(RuntimeError, match="tpu"):
        torch_utils.randn_tensor((2, 2), generator=torch.Generator("tpu").manual_seed(1), device="cpu")


# --- UNet2DConditionModel -----------------------------------------------------------------------


def test_unet2d_condition_forward_backward_matches_cpu(no_fallback):
    model_cpu = _tiny_conditional_unet()
    model_tpu = copy.deepcopy(model_cpu).to("tpu")
    torch.manual_seed(1)
    sample = torch.randn(2, 4, 8, 8)
    timesteps = torch.tensor([3, 70])
    context = torch.randn(2, 5, 8)

    out_cpu = model_cpu(sample, timesteps, context).sample
    out_tpu = model_tpu(sample.to("tpu"), timesteps.to("tpu"), context.to("tpu")).sample
    assert_close(out_tpu, out_cpu.detach(), atol=1e-5, rtol=1e-4)

    out_cpu.square().mean().backward()
    out_tpu.square().mean().backward()
    grads_tpu = dict(model_tpu.named_parameters())
    for name, param in model_cpu.named_parameters():
        assert grads_tpu[name].grad is not None, name
        assert_close(grads_tpu[name].grad, param.grad, atol=1e-6, rtol=1e-4)


# --- DDPMPipeline -------------------------------------------------------------------------------


def test_ddpm_pipeline_matches_cpu(no_fallback):
    pipe_cpu = _tiny_ddpm_pipeline()
    pipe_tpu = copy.deepcopy(pipe_cpu).to("tpu")
    assert pipe_tpu.device.type == "tpu"
    assert pipe_tpu._execution_device.type == "tpu"
    assert pipe_cpu.device.type == "cpu"

    images_tpu = _generate(pipe_tpu)
    images_cpu = _generate(pipe_cpu)
    assert images_tpu.shape == images_cpu.shape == (2, 8, 8, 3)
    np.testing.assert_allclose(images_tpu, images_cpu, rtol=0, atol=1e-5)
    # The images are not a constant: the check above compares real content.
    assert images_cpu.std() > 1e-2


def test_ddpm_pipeline_with_tpu_generator_is_reproducible(no_fallback):
    """Noise drawn on the device: another stream than the CPU's, but the same seed repeats."""
    pipe = _tiny_ddpm_pipeline().to("tpu")

    def run(seed):
        generator = torch.Generator("tpu").manual_seed(seed)
        return pipe(generator=generator, num_inference_steps=_INFERENCE_STEPS, output_type="np").images

    first, again, other = run(5), run(5), run(6)
    np.testing.assert_array_equal(first, again)
    assert np.abs(first - other).max() > 1e-3
    images_cpu = _generate(_tiny_ddpm_pipeline(), seed=5, batch_size=1)
    assert first.shape == images_cpu.shape and 0.0 <= first.min() and first.max() <= 1.0


def test_ddpm_pipeline_loaded_with_device_map_and_offload(tmp_path, no_fallback):
    _tiny_ddpm_pipeline().save_pretrained(tmp_path)
    pipe_cpu = DDPMPipeline.from_pretrained(tmp_path)
    pipe_cpu.set_progress_bar_config(disable=True)
    images_cpu = _generate(pipe_cpu, seed=3, batch_size=1)

    mapped = DDPMPipeline.from_pretrained(tmp_path, device_map="tpu")
    mapped.set_progress_bar_config(disable=True)
    assert mapped.unet.device.type == "tpu"
    np.testing.assert_allclose(_generate(mapped, seed=3, batch_size=1), images_cpu, rtol=0, atol=1e-5)

    # Model offload keeps the weights on the CPU and moves each model to the device for its call.
    offloaded = DDPMPipeline.from_pretrained(tmp_path)
    offloaded.set_progress_bar_config(disable=True)
    offloaded.enable_model_cpu_offload(device="tpu")
    assert offloaded._execution_device.type == "tpu"
    np.testing.assert_allclose(_generate(offloaded, seed=3, batch_size=1), images_cpu, rtol=0, atol=1e-5)


# --- a scheduler loop under bf16 autocast -------------------------------------------------------


def _denoise(model, device, scheduler, latents, context):
    """A text-to-image style loop: scale, predict the noise, step - all under bf16 autocast."""
    scheduler.set_timesteps(4, device=device)
    latents = latents.to(device) * scheduler.init_noise_sigma
    context = context.to(device)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        for t in scheduler.timesteps:
            model_input = scheduler.scale_model_input(latents, t)
            noise_pred = model(model_input, t, context).sample
            latents = scheduler.step(noise_pred, t, latents).prev_sample
    return latents


@pytest.mark.parametrize(
    "make_scheduler",
    [
        lambda: DDIMScheduler(num_train_timesteps=100, clip_sample=False),
        lambda: EulerDiscreteScheduler(num_train_timesteps=100),
    ],
    ids=["ddim", "euler"],
)
def test_autocast_bf16_denoising_loop_matches_cpu(make_scheduler):
    model_cpu = _tiny_conditional_unet().eval()
    model_tpu = copy.deepcopy(model_cpu).to("tpu")
    torch.manual_seed(2)
    latents = torch.randn(2, 4, 8, 8)
    context = torch.randn(2, 5, 8)

    # Autocast must really run the projections in bf16 on the device.
    seen_dtypes = []
    hook = model_tpu.down_blocks[0].attentions[0].transformer_blocks[0].attn1.to_q.register_forward_hook(
        lambda module, args, out: seen_dtypes.append(out.dtype)
    )
    torch_tpu.reset_fallback_counts()
    on_tpu = _denoise(model_tpu, "tpu", make_scheduler(), latents, context)
    assert torch_tpu.fallback_counts() == {}, f"ops fell back to the CPU: {torch_tpu.fallback_counts()}"
    hook.remove()
    assert seen_dtypes and set(seen_dtypes) == {torch.bfloat16}

    on_cpu = _denoise(model_cpu, "cpu", make_scheduler(), latents, context)
    assert on_tpu.dtype == on_cpu.dtype
    scale = on_cpu.float().abs().max().item()
    assert scale > 0.1
    # bf16 carries 8 bits of mantissa; four steps of a UNet keep well within 2% of the range.
    assert_close(on_tpu.float(), on_cpu.float(), rtol=2e-2, atol=2e-2 * scale)
