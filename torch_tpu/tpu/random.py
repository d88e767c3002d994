"""Random number generation state of torch.tpu: one (seed, offset) generator per device."""

import torch

from .. import _C
from ._device import _get_device_index, device_count


class _DefaultGenerators:
    """Sequence view of the per-device default generators (created on first access)."""

    def __len__(self):
        return device_count()

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"tpu device index {index} out of range")
        return _C._default_generator(index)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def get_rng_state(device="tpu"):
    """The generator state of a device as a uint8 CPU tensor (16 bytes: seed, offset)."""
    return default_generators[_get_device_index(device)].get_state()


def get_rng_state_all():
    return [g.get_state() for g in default_generators]


def set_rng_state(new_state, device="tpu"):
    default_generators[_get_device_index(device)].set_state(new_state.clone())


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed):
    """Seeds the current device's generator."""
    default_generators[_get_device_index(None)].manual_seed(int(seed))


def manual_seed_all(seed):
    """Seeds every device's generator (torch.manual_seed calls this too)."""
    for g in default_generators:
        g.manual_seed(int(seed))


def seed():
    default_generators[_get_device_index(None)].seed()


def seed_all():
    s = torch.initial_seed()
    for g in default_generators:
        g.manual_seed(s)


def initial_seed():
    return default_generators[_get_device_index(None)].initial_seed()
