"""This process's threads as Linux lists them (``/proc/self/task``): thread ids and names.

Shared by the exit hook (are PyTorch's autograd device threads running?) and the host profile's
per-thread CPU accounting (torch_tpu/bench/threads.py).
"""

import os

TASKS = "/proc/self/task"


def listed() -> list | None:
    """[(thread id, name)] of this process's threads now; None where the system does not list them.

    A thread that ends between the listing and the read of its name is left out.
    """
    try:
        tids = os.listdir(TASKS)
    except OSError:
        return None
    out = []
    for tid in tids:
        try:
            with open(f"{TASKS}/{tid}/comm") as f:
                out.append((int(tid), f.read().strip()))
        except (OSError, ValueError):
            continue
    return out
