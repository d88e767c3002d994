"""``torch.tpu.distributed.window_num_stripes`` / ``window_stripe_chunk_mb``: the original
TorchTPU's tuning knobs for its own TPU peer-to-peer DMA transport ("WindowTpu": how many DMA
stripes a transfer may use at once, and the smallest payload per stripe).

torch_tpu has no such transport - a collective here is an XLA collective inside a program (the
plugin moves the data) or a Gloo exchange - so the knobs are kept for code written for the
original: they read and write validated values and change nothing (docs/migrating_from_torchtpu.md).
"""

_values = {"window_num_stripes": 1, "window_stripe_chunk_mb": 1}


def _set(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"torch.tpu.distributed.{name} must be a positive int, got {value!r}")
    _values[name] = value


def get_window_num_stripes() -> int:
    return _values["window_num_stripes"]


def set_window_num_stripes(value: int) -> None:
    _set("window_num_stripes", value)


def get_window_stripe_chunk_mb() -> int:
    return _values["window_stripe_chunk_mb"]


def set_window_stripe_chunk_mb(value: int) -> None:
    _set("window_stripe_chunk_mb", value)
