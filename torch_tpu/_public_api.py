"""The public ``torch.tpu`` namespace, from one table: every public module, each of its names,
where the name lives and its stage.

``install()`` (run by ``import torch_tpu``) makes ``torch.tpu`` (the device module,
``torch_tpu.tpu``) and its public submodules (``torch.tpu.compiler``, ``.ops``, ``.distributed``,
``.optimizers``, ``.pallas``, ``.profiler``) answer exactly these names: each is imported from its home on first
use (so ``import torch_tpu`` stays cheap) and then cached on the module; a ``Property`` is a
settable attribute (``torch.tpu.eager_mode = ...``). The submodules are registered in
``sys.modules``, so ``import torch.tpu.ops`` and ``from torch.tpu.compiler import ...`` work.
``__tpu_api_stages__`` on each module maps its names to their stage. Names of the original
TorchTPU that have a home here are listed in docs/migrating_from_torchtpu.md with what they do.
"""

import importlib
import sys
import types
from typing import NamedTuple, Optional

STABLE = "stable"
EXPERIMENTAL = "experimental"


class Property(NamedTuple):
    """A settable module attribute: ``getter`` and ``setter`` targets ("module:function")."""

    getter: str
    setter: Optional[str] = None


_D = "torch_tpu.tpu._device:"
_M = "torch_tpu.tpu.memory:"
_R = "torch_tpu.tpu.random:"
_S = "torch_tpu.tpu.streams:"
_OPS = "torch_tpu.ops."
_SPARSE = "torch_tpu.ops.sparse_dense:"
_DIST = "torch_tpu.distributed."

# module -> {name: (target, stage)}; a target is "module:attribute" or a Property.
PUBLIC = {
    "torch.tpu": {
        # torch.cuda's shape
        "Event": (_S + "Event", STABLE),
        "OutOfMemoryError": ("torch:OutOfMemoryError", STABLE),
        "Stream": (_S + "Stream", STABLE),
        "StreamContext": (_S + "StreamContext", STABLE),
        "current_device": (_D + "current_device", STABLE),
        "current_stream": (_S + "current_stream", STABLE),
        "default_generators": (_R + "default_generators", STABLE),
        "default_stream": (_S + "default_stream", STABLE),
        "device": (_D + "device", STABLE),
        "device_count": (_D + "device_count", STABLE),
        "device_of": (_D + "device_of", STABLE),
        "empty_cache": (_M + "empty_cache", STABLE),
        "get_amp_supported_dtype": (_D + "get_amp_supported_dtype", STABLE),
        "get_per_process_memory_fraction": (_M + "get_per_process_memory_fraction", STABLE),
        "get_device_name": (_D + "get_device_name", STABLE),
        "get_device_properties": (_D + "get_device_properties", STABLE),
        "get_rng_state": (_R + "get_rng_state", STABLE),
        "get_rng_state_all": (_R + "get_rng_state_all", STABLE),
        "init": (_D + "init", STABLE),
        "initial_seed": (_R + "initial_seed", STABLE),
        "is_available": (_D + "is_available", STABLE),
        "is_bf16_supported": (_D + "is_bf16_supported", STABLE),
        "is_initialized": (_D + "is_initialized", STABLE),
        "manual_seed": (_R + "manual_seed", STABLE),
        "manual_seed_all": (_R + "manual_seed_all", STABLE),
        "max_memory_allocated": (_M + "max_memory_allocated", STABLE),
        "max_memory_reserved": (_M + "max_memory_reserved", STABLE),
        "mem_get_info": (_M + "mem_get_info", STABLE),
        "memory_allocated": (_M + "memory_allocated", STABLE),
        "memory_reserved": (_M + "memory_reserved", STABLE),
        "memory_sources": (_M + "memory_sources", STABLE),
        "memory_stats": (_M + "memory_stats", STABLE),
        "reset_accumulated_memory_stats": (_M + "reset_accumulated_memory_stats", STABLE),
        "reset_peak_memory_stats": (_M + "reset_peak_memory_stats", STABLE),
        "seed": (_R + "seed", STABLE),
        "seed_all": (_R + "seed_all", STABLE),
        "set_device": (_D + "set_device", STABLE),
        "set_per_process_memory_fraction": (_M + "set_per_process_memory_fraction", STABLE),
        "set_rng_state": (_R + "set_rng_state", STABLE),
        "set_rng_state_all": (_R + "set_rng_state_all", STABLE),
        "set_stream": (_S + "set_stream", STABLE),
        "stream": (_S + "stream", STABLE),
        "synchronize": (_D + "synchronize", STABLE),
        # the compilation cache
        "clear_compilation_cache": ("torch_tpu.tpu.cache:clear_compilation_cache", STABLE),
        "compilation_cache_stats": ("torch_tpu.tpu.cache:compilation_cache_stats", STABLE),
        # the original TorchTPU's execution and precision controls
        "EagerMode": ("torch_tpu.tpu.modes:EagerMode", EXPERIMENTAL),
        "eager_mode": (Property("torch_tpu.tpu.modes:get_eager_mode",
                                "torch_tpu.tpu.modes:set_eager_mode_now"), EXPERIMENTAL),
        "set_eager_mode": ("torch_tpu.tpu.modes:set_eager_mode", EXPERIMENTAL),
        "Precision": ("torch_tpu.tpu.precision_control:Precision", EXPERIMENTAL),
        "precision": ("torch_tpu.tpu.precision_control:precision", EXPERIMENTAL),
        "allow_excess_precision": (Property("torch_tpu.tpu.precision_control:get_allow_excess_precision",
                                            "torch_tpu.tpu.precision_control:set_allow_excess_precision"),
                                   EXPERIMENTAL),
        "topology_aware_mesh": (_DIST + "topology:topology_aware_mesh", EXPERIMENTAL),
    },
    "torch.tpu.compiler": {
        "custom_compiler_options": ("torch_tpu.tpu.compiler_options:custom_compiler_options", EXPERIMENTAL),
    },
    "torch.tpu.distributed": {
        "set_tpu_launch_env": (_DIST + "launch_env:set_tpu_launch_env", EXPERIMENTAL),
        "spmd_safe": (_DIST + "spmd:spmd_safe", EXPERIMENTAL),
        "topology_aware_mesh": (_DIST + "topology:topology_aware_mesh", EXPERIMENTAL),
        "window_num_stripes": (Property(_DIST + "window_knobs:get_window_num_stripes",
                                        _DIST + "window_knobs:set_window_num_stripes"), EXPERIMENTAL),
        "window_stripe_chunk_mb": (Property(_DIST + "window_knobs:get_window_stripe_chunk_mb",
                                            _DIST + "window_knobs:set_window_stripe_chunk_mb"), EXPERIMENTAL),
    },
    "torch.tpu.ops": {
        "align_jagged_to_multiple": (_OPS + "jagged:align_jagged_to_multiple", EXPERIMENTAL),
        "all_gather_dim": (_OPS + "collectives:all_gather_dim", EXPERIMENTAL),
        "max_pool1d": (_OPS + "pooling:max_pool1d", STABLE),
        "max_pool1d_backward": (_OPS + "pooling:max_pool1d_backward", STABLE),
        "max_pool2d": (_OPS + "pooling:max_pool2d", STABLE),
        "max_pool2d_backward": (_OPS + "pooling:max_pool2d_backward", STABLE),
        "max_pool3d": (_OPS + "pooling:max_pool3d", STABLE),
        "max_pool3d_backward": (_OPS + "pooling:max_pool3d_backward", STABLE),
        "optimization_barrier": (_OPS + "barrier:optimization_barrier", EXPERIMENTAL),
        "ragged_all_to_all": (_OPS + "collectives:ragged_all_to_all", EXPERIMENTAL),
        "ragged_dot": (_OPS + "ragged:ragged_dot", EXPERIMENTAL),
        "ragged_dot_weight_grad": (_OPS + "ragged:ragged_dot_weight_grad", EXPERIMENTAL),
        "recv": (_OPS + "collectives:recv", EXPERIMENTAL),
        "reduce_scatter_dim": (_OPS + "collectives:reduce_scatter_dim", EXPERIMENTAL),
        "send": (_OPS + "collectives:send", EXPERIMENTAL),
        "splash_sdpa": (_OPS + "attention:splash_sdpa", EXPERIMENTAL),
        "sparse_dense_matmul": (_SPARSE + "sparse_dense_matmul", EXPERIMENTAL),
        "sparse_dense_matmul_activation_unstack": (_SPARSE + "sparse_dense_matmul_activation_unstack", EXPERIMENTAL),
        "sparse_dense_matmul_grad_with_adagrad": (_SPARSE + "sparse_dense_matmul_grad_with_adagrad", EXPERIMENTAL),
        "sparse_dense_matmul_grad_with_adam": (_SPARSE + "sparse_dense_matmul_grad_with_adam", EXPERIMENTAL),
        "sparse_dense_matmul_grad_with_sgd": (_SPARSE + "sparse_dense_matmul_grad_with_sgd", EXPERIMENTAL),
        "sparse_dense_matmul_gradient_stack": (_SPARSE + "sparse_dense_matmul_gradient_stack", EXPERIMENTAL),
        "sparse_gather": (_OPS + "sparse_rows:sparse_gather", EXPERIMENTAL),
        "sparse_gather_backward": (_OPS + "sparse_rows:sparse_gather_backward", EXPERIMENTAL),
        "sparse_iota": (_OPS + "sparse_rows:sparse_iota", EXPERIMENTAL),
        "sparse_map_row": (_OPS + "sparse_rows:sparse_map_row", EXPERIMENTAL),
        "strip_jagged_padding": (_OPS + "jagged:strip_jagged_padding", EXPERIMENTAL),
    },
    "torch.tpu.optimizers": {
        "AdamW": ("torch_tpu.optimizers.adamw:AdamW", EXPERIMENTAL),
        "Muon": ("torch_tpu.optimizers.muon:Muon", EXPERIMENTAL),
        "Optimizer": ("torch_tpu.optimizers.base:Optimizer", EXPERIMENTAL),
        "Sgd": ("torch_tpu.optimizers.sgd:Sgd", EXPERIMENTAL),
        "SingleTraceTrainer": ("torch_tpu.optimizers.trainer:SingleTraceTrainer", EXPERIMENTAL),
    },
    "torch.tpu.pallas": {
        "custom_jax_kernel": ("torch_tpu.kernels:jax_op", STABLE),
        "get_pallas_mesh": ("torch_tpu.kernels.mesh:get_pallas_mesh", EXPERIMENTAL),
        "jax_op": ("torch_tpu.kernels:jax_op", STABLE),
        "stablehlo_op": ("torch_tpu.kernels:stablehlo_op", STABLE),
    },
    "torch.tpu.profiler": {
        "TpuProfilerConfig": ("torch_tpu.profiler.config:TpuProfilerConfig", EXPERIMENTAL),
    },
}

DOCS = {
    "torch.tpu.compiler": "XLA compiler options for the programs compiled in a block.",
    "torch.tpu.distributed": "SPMD regions, topology-aware meshes and the launch environment.",
    "torch.tpu.ops": "Ops beyond ATen: barriers, pooling without indices, jagged helpers, collectives, MoE and SparseCore-style sparse ops.",
    "torch.tpu.optimizers": "Functional optimizers and SingleTraceTrainer: a whole training step as one program.",
    "torch.tpu.pallas": "Custom kernels from JAX / Pallas and StableHLO (JAX is imported on first use).",
    "torch.tpu.profiler": "Options of the tpu trace for torch.profiler (TpuProfilerConfig).",
}


def _resolve(target: str):
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def module_by_name(name: str) -> types.ModuleType:
    """A public module by name, loading torch_tpu first: how pickles refer to these modules
    (their types are not plain ModuleType, which pickle and cloudpickle would otherwise try to
    copy, e.g. when Ray ships a training function that uses ``torch.tpu``)."""
    import torch_tpu  # noqa: F401  (installs the namespace)

    return sys.modules[name]


def _module_class(name: str, exports: dict, base=types.ModuleType):
    """A module type whose instances resolve ``exports`` lazily and carry its properties."""

    def __getattr__(self, attr):
        entry = exports.get(attr)
        if entry is None or isinstance(entry[0], Property):
            raise AttributeError(f"module '{name}' has no attribute '{attr}'")
        value = _resolve(entry[0])
        self.__dict__[attr] = value  # cached: later lookups are plain attribute reads
        return value

    def __dir__(self):
        return sorted(set(exports) | set(self.__dict__))

    def __reduce__(self):
        return module_by_name, (self.__name__,)

    namespace = {"__getattr__": __getattr__, "__dir__": __dir__, "__reduce__": __reduce__}
    for attr, (target, _stage) in exports.items():
        if isinstance(target, Property):
            getter = (lambda t: lambda self: _resolve(t)())(target.getter)
            setter = None
            if target.setter is not None:
                setter = (lambda t: lambda self, value: _resolve(t)(value))(target.setter)
            namespace[attr] = property(getter, setter)
    return type(name.replace(".", "_") + "_module", (base,), namespace)


def _stages(exports: dict) -> dict:
    return {attr: stage for attr, (_target, stage) in exports.items()}


def install(device_module: types.ModuleType) -> None:
    """Builds the namespace: ``device_module`` becomes ``torch.tpu``; submodules are made."""
    for name, exports in PUBLIC.items():
        if name == "torch.tpu":
            module = device_module
            module.__class__ = _module_class(name, exports, type(module))
        else:
            module = _module_class(name, exports)(name, DOCS.get(name))
            sys.modules[name] = module
            parent, _, short = name.rpartition(".")
            setattr(device_module if parent == "torch.tpu" else sys.modules[parent], short, module)
        module.__all__ = sorted(exports)
        module.__tpu_api_stages__ = _stages(exports)
