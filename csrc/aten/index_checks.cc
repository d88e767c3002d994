#include "aten/index_checks.h"

#include <c10/util/Exception.h>

#include <memory>
#include <sstream>
#include <string>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "common/env_flag.h"
#include "exec/execution_mode.h"
#include "runtime/runtime.h"
#include "runtime/transfers.h"

namespace tpu::aten {
namespace {

thread_local const char* t_op_name = nullptr;  // set by IndexCheckOpName

bool env_check_indices() {
  static const bool on = env_flag("TORCH_TPU_CHECK_INDICES");
  return on;
}

// The CPU's wording, plus the op and the bounds (the device verdict does not say which index).
std::string message_of(const char* op, IndexErrorKind kind, const std::vector<IndexBound>& bounds) {
  std::ostringstream s;
  s << op << "(): ";
  for (size_t i = 0; i < bounds.size(); ++i) {
    const IndexBound& b = bounds[i];
    if (i) s << "; or ";
    const int64_t lo = b.allow_negative ? -b.size : 0;
    if (kind == IndexErrorKind::kIndexError && !b.allow_negative) {
      s << "index out of range in self (an index is outside [" << lo << ", " << b.size << ") for dimension " << b.dim
        << " with size " << b.size << ")";
    } else {
      s << "index is out of bounds for dimension " << b.dim << " with size " << b.size << " (an index is outside ["
        << lo << ", " << b.size << "))";
    }
  }
  return s.str();
}

}  // namespace

IndexCheckOpName::IndexCheckOpName(const char* op) : previous_(t_op_name) { t_op_name = op; }
IndexCheckOpName::~IndexCheckOpName() { t_op_name = previous_; }

bool index_checks_on() {
  return exec::eager_mode() == exec::EagerMode::kDebug || env_check_indices();
}

void check_index_bounds(const char* op, IndexErrorKind kind, const std::vector<IndexBound>& all) {
  if (t_op_name != nullptr) op = t_op_name;
  std::vector<IndexBound> bounds;
  for (const IndexBound& b : all) {
    if (b.index.defined() && b.index.numel() > 0) bounds.push_back(b);
  }
  if (bounds.empty()) return;
  OpRunner r("index_in_range", "torch_tpu::index_check");
  std::vector<int64_t> lo, hi;
  for (const IndexBound& b : bounds) {
    r.input(b.index, at::kLong);
    lo.push_back(b.allow_negative ? -b.size : 0);
    hi.push_back(b.size);
  }
  r.attrs().set_ints("lo", lo).set_ints("hi", hi);
  const at::Tensor verdict = r.run1();
  const std::string message = message_of(op, kind, bounds);
  const exec::EagerMode mode = exec::eager_mode();
  if (mode == exec::EagerMode::kDebug) {
    if (runtime::read_flag(*storage(verdict).contents().buffer)) return;
    if (kind == IndexErrorKind::kIndexError) TORCH_CHECK_INDEX(false, message);
    TORCH_CHECK(false, message);
  }
  runtime::DeferredChecks::Check check;
  if (mode == exec::EagerMode::kFused) {
    // The verdict is pending in the deferred graph; reading it flushes the graph.
    check.passed = [verdict] { return runtime::read_flag(*storage(verdict).contents().buffer); };
  } else {
    std::shared_ptr<pjrt::Buffer> buffer = storage(verdict).current_contents().buffer;
    check.passed = [buffer] { return runtime::read_flag(*buffer); };
  }
  check.message = message +
                  " [torch_tpu: device-side index check (TORCH_TPU_CHECK_INDICES=1), reported at the next "
                  "synchronization; TPU_LAUNCH_BLOCKING=1 raises it at the call]";
  runtime::Runtime::get().tracker(tpu_index(verdict)).checks().add(std::move(check));
}

}  // namespace tpu::aten
