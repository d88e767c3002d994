"""A clean process exit after backward passes on tpu tensors.

PyTorch's autograd engine runs the backward of device tensors on one thread per device index
(``pt_autograd_<i>``) - on threads other than the one that imported torch_tpu, which runs its
own (torch_tpu/_autograd_thread.py), or everywhere with TORCH_TPU_AUTOGRAD_DEVICE_THREADS=1.
Every ``backward()``/``autograd.grad()`` stashes a Python object (a
``contextvars.Context``) in the thread-local state that the engine's GraphTask copies, so
whichever thread drops the last reference to the GraphTask must take the GIL to release it.
The device thread finishes the task, wakes the caller and only then drops its reference; when
it is descheduled in between, the caller may run to the end of the script first. The device
thread then asks for the GIL while the interpreter is finalizing, Python ends it with
``pthread_exit``, and that unwinding meets a ``noexcept`` destructor: ``std::terminate``
("terminate called without an active exception", exit code 134) after all output was printed.

The fix, at exit (``atexit`` handlers run before finalization, while other threads can still
take the GIL): send one empty backward through each tpu device's autograd thread and wait for
it, with the GIL released. A device thread takes that task only after it has dropped its
previous GraphTask, so once the task is done every earlier GraphTask is gone. The empty
backward runs on a fresh thread, calling the engine directly, so its own GraphTask holds no
Python object and may be released at any time. The wait is bounded (a device thread stuck in
a user's backward at exit does not hang the exit).
"""

import atexit
import contextlib
import threading

import torch

from . import _C, _os_threads

# An empty backward takes well under a millisecond; this only bounds a stuck device thread.
_WAIT_S = 5.0


def _autograd_device_threads_started() -> bool:
    """Whether the engine's device threads exist (they start at the first device backward)."""
    threads = _os_threads.listed()
    if threads is None:
        return True  # cannot tell: drain anyway (starting the threads is cheap)
    return any(name.startswith("pt_autograd_") for _, name in threads)


def _empty_backward_through_device_threads(num_devices: int) -> None:
    # Zero-element tensors: the view's backward is a reshape, no device program runs. Nothing
    # the GraphTask keeps after it finishes may own a Python object (its release needs no GIL):
    # so not torch.autograd.backward/grad (they stash a contextvars.Context in this thread's
    # state) and no captured gradients (returned to Python, they would be in its result); the
    # gradient is accumulated into leaf.grad instead, which this thread owns.
    engine = torch.autograd.Variable._execution_engine
    keep = []
    for index in range(num_devices):
        device = torch.device("tpu", index)
        leaf = torch.empty(0, device=device, requires_grad=True)
        root = leaf.view(0)
        grad = torch.empty(0, device=device)
        engine.run_backward((root,), (grad,), False, False, (), True, True)
        keep.append((leaf, root, grad))


@contextlib.contextmanager
def _without_python_modes():
    from torch.utils._python_dispatch import _disable_current_modes

    function_modes = []
    while torch._C._len_torch_function_stack() > 0:
        function_modes.append(torch._C._pop_torch_function_stack())
    try:
        with _disable_current_modes():
            yield
    finally:
        for mode in reversed(function_modes):
            torch._C._push_on_torch_function_stack(mode)


def drain_autograd_device_threads(timeout: float = _WAIT_S) -> bool:
    """Waits until the tpu devices' autograd threads have released every finished backward.

    Returns True when they have (or none exist), False when ``timeout`` seconds passed first.
    """
    if not _C._is_initialized() or not _autograd_device_threads_started():
        return True
    num_devices = _C._device_count()
    if num_devices <= 0:
        return True
    errors = []

    def run():
        try:
            _empty_backward_through_device_threads(num_devices)
        except Exception as e:  # never fail an exit over this
            errors.append(e)

    worker = threading.Thread(target=run, name="torch_tpu exit drain", daemon=True)
    try:
        worker.start()
    except RuntimeError:
        # Python 3.12+ refuses new threads in atexit handlers: run it here, unbounded, with
        # this thread's modes set aside so the GraphTask holds no Python object.
        with _without_python_modes():
            run()
        return not errors
    worker.join(timeout)  # releases the GIL: the device threads can take it to release theirs
    return not worker.is_alive() and not errors


def _at_exit() -> None:
    try:
        drain_autograd_device_threads()
    except Exception:
        pass


atexit.register(_at_exit)
