// How much device memory this process may hold in tpu tensors, per device, like CUDA's
// set_per_process_memory_fraction:
//   - TORCH_TPU_MEMORY_LIMIT=<bytes>[K|M|G|T[i][B]] caps every device (binary multiples);
//   - torch.tpu.set_per_process_memory_fraction(f, device) caps one device at f times its
//     total memory (the plugin's figure, or the host's RAM on the CPU plugin).
// An allocation past the cap raises torch.OutOfMemoryError (c10::OutOfMemoryError) before
// anything is allocated, naming the figures and the fix, so the process stays usable. Without a
// cap the plugin's own RESOURCE_EXHAUSTED errors are reported the same way (is_out_of_memory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tpu::device {

// Throws c10::OutOfMemoryError when `device` holds `in_use` bytes and `requested` more would
// pass its cap.
void check_memory_limit(int device, int64_t in_use, int64_t requested);
// Whether any device has a cap (a cheap check for the allocator's hot path).
bool memory_limited();

// The cap of `device` in bytes, if any.
std::optional<int64_t> memory_limit(int device);
// Caps `device` at `fraction` (0 < fraction <= 1) of its total memory; returns the byte cap.
int64_t set_memory_fraction(int device, double fraction);
// The fraction set for `device` (1.0 when none was set).
double memory_fraction(int device);

// Whether a device error message is the plugin running out of memory.
bool is_out_of_memory(const std::string& message);
// Raises a device error: torch.OutOfMemoryError (with the figures and the fix) when it is one
// of running out of memory, else a RuntimeError with the message.
[[noreturn]] void raise_device_error(const std::string& message, int device);

}  // namespace tpu::device
