"""ModuleInfo entries that PyTorch's module_db lacks: the random modules (Dropout family, RReLU).
Their train-mode results are random, so the sweep checks them by statistics
(conformance/module_random.py); eval mode is compared exactly like every other module."""

from functools import partial

import torch
from torch.testing import make_tensor
from torch.testing._internal.common_modules import FunctionInput, ModuleInfo, ModuleInput


def _inputs(shapes_and_args, module_info, device, dtype, requires_grad, training, **kwargs):
    make = partial(make_tensor, device=device, dtype=dtype, requires_grad=requires_grad, low=-2, high=2)
    return [ModuleInput(constructor_input=FunctionInput(*args, **kw), forward_input=FunctionInput(make(shape)),
                        desc=desc)
            for desc, shape, args, kw in shapes_and_args]


# (description, input shape, constructor args, constructor kwargs). Inputs are large enough for
# the keep-rate statistics to mean something.
_DROPOUT = [("p0.5", (64, 32), (0.5,), {}), ("p0.2", (16, 8, 8), (0.2,), {}), ("p0", (8, 8), (0.0,), {}),
            ("p1", (8, 8), (1.0,), {})]
_DROPOUT1D = [("p0.5", (4, 32, 8), (0.5,), {}), ("no_batch", (32, 8), (0.3,), {})]
_DROPOUT2D = [("p0.5", (4, 32, 3, 3), (0.5,), {}), ("p0.3", (2, 64, 2, 3), (0.3,), {})]
_DROPOUT3D = [("p0.5", (4, 32, 2, 2, 2), (0.5,), {}), ("p0.3", (2, 64, 2, 1, 3), (0.3,), {})]
_ALPHA = [("p0.5", (64, 32), (0.5,), {}), ("p0.2", (16, 64), (0.2,), {})]
_FEATURE_ALPHA = [("p0.5", (4, 32, 3, 3), (0.5,), {})]
_RRELU = [("default", (64, 32), (), {}), ("range", (16, 64), (0.1, 0.3), {})]

EXTRA_MODULE_DB = [
    ModuleInfo(torch.nn.Dropout, module_inputs_func=partial(_inputs, _DROPOUT), train_and_eval_differ=True),
    ModuleInfo(torch.nn.Dropout1d, module_inputs_func=partial(_inputs, _DROPOUT1D), train_and_eval_differ=True),
    ModuleInfo(torch.nn.Dropout2d, module_inputs_func=partial(_inputs, _DROPOUT2D), train_and_eval_differ=True),
    ModuleInfo(torch.nn.Dropout3d, module_inputs_func=partial(_inputs, _DROPOUT3D), train_and_eval_differ=True),
    ModuleInfo(torch.nn.AlphaDropout, module_inputs_func=partial(_inputs, _ALPHA), train_and_eval_differ=True),
    ModuleInfo(torch.nn.FeatureAlphaDropout, module_inputs_func=partial(_inputs, _FEATURE_ALPHA),
               train_and_eval_differ=True),
    ModuleInfo(torch.nn.RReLU, module_inputs_func=partial(_inputs, _RRELU), train_and_eval_differ=True),
]
