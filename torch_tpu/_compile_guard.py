"""APIs that cannot run inside ``torch.compile``: tracing one is a clear error, not a silent
graph break that would run the surrounding frame eagerly."""

import torch


def forbidden_in_compile(reason: str):
    """Marks a function or context manager as an error to call inside a compiled region
    (Dynamo raises "Attempt to trace forbidden callable <name>"); ``reason`` goes into its
    docstring."""

    def mark(fn):
        fn.__doc__ = (fn.__doc__ or "") + f"\n\n    Not allowed inside ``torch.compile``: {reason}\n"
        return torch._dynamo.forbid_in_graph(fn)

    return mark
