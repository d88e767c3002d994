// Whether memory the XLA CPU plugin frees goes back to the operating system at once.
//
// On the CPU plugin device memory is host memory, and every program execution allocates its
// scratch space (XLA's preallocated temp buffer, tens of MB for a fused training step) and
// frees it at the end. glibc serves blocks above its mmap threshold (at most 32 MB) with mmap
// and unmaps them on free, so each execution faulted in fresh zeroed pages again - about a
// third of a fused LSTM training step. With "keep" (the default for the XLA CPU plugin) the
// process keeps freed pages mapped for reuse, as a CUDA caching allocator keeps device memory:
// large blocks come from the heap, the heap is not trimmed, and threads started later share
// the main heap, so the resident size stays near its peak instead of shrinking. (A thread that
// already has an arena of its own still unmaps a secondary heap once it is empty.)
//
// The one arena has a price: every thread's malloc and free takes the same lock, and the thread
// recording Fused Eager's ops allocates while XLA's threads run the last program. "keep-arenas"
// keeps the pages but leaves glibc's per-thread arenas (small Fused steps faster, steps whose
// large blocks come from threads with arenas of their own slower: docs/design.md).
//
//   TORCH_TPU_HOST_PAGES=keep|keep-arenas|release   (default keep with the XLA CPU plugin;
//                                        release: glibc's defaults, memory returned as soon as
//                                        it is freed)
#pragma once

#include "runtime/client_options.h"

namespace tpu::runtime {

// Applies the policy for a plugin of `kind`. Throws std::runtime_error naming the variable for
// a value that is not one of its choices. Returns whether pages are kept.
bool apply_host_pages_policy(PluginKind kind, const EnvLookup& env);

}  // namespace tpu::runtime
