// torch._assert_async on the device, with CUDA's semantics: the call computes the verdict
// (`t != 0`, one tiny cached program - none at all for a bool tensor in Strict mode) and returns
// at once; the device's WorkTracker keeps it (runtime/deferred_checks.h) and the next
// synchronization - torch.tpu.synchronize(), a blocking host read (.item(), .cpu(), print) -
// raises a RuntimeError with the message when it is false. Debug mode (TPU_LAUNCH_BLOCKING=1)
// raises at the call. In Fused mode the verdict is a value of the deferred graph (an output,
// since the check holds it). A failed assertion is consumed when raised: later work runs.
//
// Messages are PyTorch's CPU wording; shape errors (no element, several elements) are raised
// at the call, as on the CPU and CUDA, since the host knows them without the device.
#include <ATen/ops/_assert_async.h>
#include <torch/library.h>

#include <string>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "device/current_device.h"
#include "exec/execution_mode.h"
#include "runtime/runtime.h"
#include "runtime/transfers.h"

namespace tpu::aten {
namespace {

constexpr char kLabel[] = "aten::_assert_async";
constexpr char kLabelMsg[] = "aten::_assert_async.msg";

// The CPU kernel's message for a false assertion.
std::string cpu_message(const std::optional<c10::string_view>& msg) {
  if (!msg) return "Expected Tensor with single nonzero value, but got zero";
  return msg->empty() ? std::string("Assertion is failed") : std::string(msg->data(), msg->size());
}

// A check reading `verdict` (a bool scalar tpu tensor nothing else writes).
runtime::DeferredChecks::Check check_of(at::Tensor verdict, std::string message) {
  if (exec::eager_mode() != exec::EagerMode::kFused) {
    // Strict: hold the (immutable) buffer itself, so no tensor outlives the call.
    std::shared_ptr<pjrt::Buffer> buffer = storage(verdict).current_contents().buffer;
    return {[buffer] { return runtime::read_flag(*buffer); }, std::move(message)};
  }
  // Fused: the verdict is pending in the deferred graph; reading it flushes the graph.
  return {[verdict] { return runtime::read_flag(*storage(verdict).contents().buffer); }, std::move(message)};
}

void assert_async(const at::Tensor& self, const std::optional<c10::string_view>& msg) {
  const char* label = msg ? kLabelMsg : kLabel;
  const int64_t n = self.numel();
  TORCH_CHECK(n != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(n < 2, "Boolean value of Tensor with more than one value is ambiguous");
  const exec::EagerMode mode = exec::eager_mode();
  const at::Tensor scalar = self.reshape({});
  at::Tensor verdict;
  if (mode == exec::EagerMode::kStrict && self.scalar_type() == at::kBool && !storage(self).pending()) {
    // A written bool scalar that is its storage's whole buffer is its own verdict.
    auto contents = storage(self).current_contents();
    if (contents.buffer && is_whole_buffer(scalar, contents)) verdict = scalar;
  }
  if (!verdict.defined()) {
    OpRunner r("ne", label);
    r.input(scalar).scalar(0, self.scalar_type());
    verdict = r.run1();
  }
  runtime::WorkTracker& tracker = runtime::Runtime::get().tracker(tpu_index(self));
  if (mode == exec::EagerMode::kDebug) {
    // The op has finished (Debug waits for each op): raise here, with the CPU's message.
    TORCH_CHECK(runtime::read_flag(*storage(verdict).contents().buffer), cpu_message(msg));
    return;
  }
  tracker.checks().add(check_of(
      verdict, cpu_message(msg) + " [torch_tpu: device-side assertion " + label +
                   ", reported at the next synchronization; TPU_LAUNCH_BLOCKING=1 raises it at the call]"));
}

void k_assert_async(const at::Tensor& self) { assert_async(self, std::nullopt); }

void k_assert_async_msg(const at::Tensor& self, c10::string_view msg) { assert_async(self, msg); }

// The functional form (export's runtime asserts): the same check, then a new dep token.
at::Tensor k_functional_assert_async_msg(const at::Tensor& self, c10::string_view msg, const at::Tensor& dep_token) {
  if (self.is_privateuseone()) {
    assert_async(self, msg);
  } else {
    at::_assert_async(self, msg);  // a host condition (with a tpu token): checked at once
  }
  return dep_token.clone();
}

at::Tensor k_make_dep_token(std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                            std::optional<at::Device> dev, std::optional<bool> pin_memory,
                            std::optional<at::MemoryFormat> memory_format) {
  const int index = dev && dev->has_index() ? dev->index() : tpu::device::current_device();
  return empty_on({}, dtype.value_or(at::kFloat), index);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_assert_async", k_assert_async);
  m.impl("_assert_async.msg", k_assert_async_msg);
  m.impl("_functional_assert_async.msg", k_functional_assert_async_msg);
  m.impl("_make_dep_token", k_make_dep_token);
}

}  // namespace
}  // namespace tpu::aten
