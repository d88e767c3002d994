// Opt-in bounds checks of the indices of index_select, embedding, gather, scatter*, x[idx] and
// index_put_. XLA clamps out-of-range gathers and drops out-of-range scatters, where PyTorch
// raises; these checks restore PyTorch's error:
//   Debug mode (TPU_LAUNCH_BLOCKING=1)         - checked at the call, the CPU's exception type.
//   Strict/Fused with TORCH_TPU_CHECK_INDICES=1 - one small device program computes the verdict,
//                                                 raised at the next synchronization (as
//                                                 torch._assert_async: runtime/deferred_checks.h).
//   otherwise (the default)                    - nothing: no program, no sync.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace tpu::aten {

// One index tensor (on the tpu device) and the size of the dimension it indexes.
struct IndexBound {
  at::Tensor index;
  int64_t dim = 0;
  int64_t size = 0;
  bool allow_negative = false;  // x[idx] / index_put_ wrap [-size, 0) as PyTorch does
};

enum class IndexErrorKind { kIndexError, kRuntimeError };  // the CPU's exception type for the op

// Whether the calling thread's ops check indices: two cached reads (the mode, the env flag).
bool index_checks_on();

// While alive, the calling thread's checks name `op` instead of the kernel's own name: a composite
// op (embedding, built on index_select) reports its own name, as on the CPU.
class IndexCheckOpName {
 public:
  explicit IndexCheckOpName(const char* op);
  ~IndexCheckOpName();
  IndexCheckOpName(const IndexCheckOpName&) = delete;
  IndexCheckOpName& operator=(const IndexCheckOpName&) = delete;

 private:
  const char* previous_;
};

// Checks `bounds` for `op` (the name in the message). Call only when index_checks_on().
void check_index_bounds(const char* op, IndexErrorKind kind, const std::vector<IndexBound>& bounds);

}  // namespace tpu::aten
