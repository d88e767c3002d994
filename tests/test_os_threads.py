"""`torch_tpu._os_threads.listed()`: this process's threads with the names Linux holds for them
(read by the exit hook, which looks for PyTorch's autograd device threads, and by the host
profile's per-thread accounting)."""

import ctypes
import ctypes.util
import sys
import threading

import pytest

from torch_tpu import _os_threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")

_PR_SET_NAME = 15


def test_listed_names_each_thread_and_forgets_ended_ones():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    named, release = threading.Event(), threading.Event()
    tid = []

    def worker():
        tid.append(threading.get_native_id())
        assert libc.prctl(_PR_SET_NAME, b"os_threads_test", 0, 0, 0) == 0
        named.set()
        release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    assert named.wait(10)
    listed = dict(_os_threads.listed())
    assert listed[tid[0]] == "os_threads_test"
    assert threading.get_native_id() in listed  # the calling thread too
    release.set()
    t.join(10)
    assert tid[0] not in dict(_os_threads.listed())
