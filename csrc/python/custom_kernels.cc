#include "python/custom_kernels.h"

#include <optional>

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/util/Exception.h>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "distributed/device_backend.h"
#include "host_aten/conv_kernel.h"
#include "host_aten/lstm_kernel.h"
#include "host_aten/kernel_call.h"
#include "lowering/custom_kernel.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace tpu::python {
namespace {

// Runs kernel `symbol` on `inputs` (tpu tensors, passed in their own dtypes) as one op: a
// per-op program in Strict/Debug mode, part of the deferred graph in Fused mode and of the
// compiled program under torch.compile. Output i is written into targets[i] when given (an
// input aliased to it: the program then reuses that input's buffer, donated to the output when
// nothing else holds it); the others are returned as fresh tensors, in order.
const char* registered_label(const std::string& symbol) {
  const char* label = lowering::custom_kernel_label(symbol);
  TORCH_CHECK(label != nullptr, "torch_tpu: custom kernel @", symbol, " is not registered");
  return label;
}

std::vector<at::Tensor> run_custom_kernel(const std::string& symbol, const std::vector<at::Tensor>& inputs,
                                          const std::vector<std::vector<int64_t>>& out_shapes,
                                          const std::vector<at::ScalarType>& out_dtypes,
                                          const std::vector<std::optional<at::Tensor>>& targets,
                                          const exec::ReplicaGroup* group = nullptr) {
  const char* label = registered_label(symbol);
  TORCH_CHECK(out_shapes.size() == out_dtypes.size(), label, ": ", out_shapes.size(), " output shapes but ",
              out_dtypes.size(), " output dtypes");
  TORCH_CHECK(!out_shapes.empty(), label, ": a kernel must return at least one array");
  aten::OpRunner runner("custom_kernel", label);
  if (group != nullptr) runner.over(group);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    TORCH_CHECK(t.is_privateuseone(), label, ": input ", i, " is a ", t.device().str(),
                " tensor; every input must be on the tpu device");
    runner.input(t);
  }
  hlo::Dims dtypes, ranks, dims;
  for (size_t i = 0; i < out_shapes.size(); ++i) {
    TORCH_CHECK(aten::is_supported(out_dtypes[i]), label, ": output ", i, " has unsupported dtype ", out_dtypes[i]);
    dtypes.push_back(static_cast<int64_t>(aten::element_type(out_dtypes[i])));
    ranks.push_back(static_cast<int64_t>(out_shapes[i].size()));
    dims.insert(dims.end(), out_shapes[i].begin(), out_shapes[i].end());
  }
  runner.attrs()
      .set_string("kernel", symbol)
      .set_ints("out_dtypes", dtypes)
      .set_ints("out_ranks", ranks)
      .set_ints("out_dims", dims);
  if (targets.empty()) return runner.run(out_shapes.size());
  TORCH_CHECK(targets.size() == out_shapes.size(), label, ": ", targets.size(), " output targets for ",
              out_shapes.size(), " outputs");
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].has_value()) continue;
    const at::Tensor& t = *targets[i];
    TORCH_CHECK(t.is_privateuseone(), label, ": the target of output ", i, " is a ", t.device().str(),
                " tensor; it must be on the tpu device");
    TORCH_CHECK(t.sizes().vec() == out_shapes[i] && t.scalar_type() == out_dtypes[i], label, ": output ", i,
                " is ", out_dtypes[i], out_shapes[i], " but the input aliased to it is ", t.scalar_type(),
                t.sizes());
  }
  return runner.run_mixed(targets);
}

// The same, for a kernel whose program holds collectives over the ranks of `backend`'s group (a
// jax_op over a mesh of the ranks): run as one collective of the group (DeviceBackend::run_over_group).
std::vector<at::Tensor> run_custom_kernel_over_group(c10d::Backend* backend, const std::string& symbol,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const std::vector<std::vector<int64_t>>& out_shapes,
                                                     const std::vector<at::ScalarType>& out_dtypes,
                                                     const std::vector<std::optional<at::Tensor>>& targets) {
  const char* label = registered_label(symbol);
  auto* ranks = dynamic_cast<distributed::DeviceBackend*>(backend);
  TORCH_CHECK(ranks != nullptr, label, ": a kernel over a mesh of ranks runs its collectives inside the ranks' "
              "programs, which needs tpu_dist's device transport (every rank of the group in this process, on "
              "its own device); this group's tpu backend is not one. Fix: run the ranks as threads of one "
              "process (TORCH_TPU_DIST_TRANSPORT=device), or call the kernel without mesh=");
  return ranks->run_over_group(label, inputs, [&](const exec::ReplicaGroup& group) {
    return run_custom_kernel(symbol, inputs, out_shapes, out_dtypes, targets, &group);
  });
}

}  // namespace

void bind_custom_kernels(py::module_& m) {
  m.def("_register_custom_kernel", [](const std::string& symbol, const std::string& text, const std::string& label) {
    lowering::register_custom_kernel(symbol, text, label);
  });
  m.def("_has_custom_kernel",
        [](const std::string& symbol) { return lowering::custom_kernel_label(symbol) != nullptr; });
  // The host kernels the plugin runs as FFI custom calls (the CPU plugin; none elsewhere).
  m.def("_host_kernels", [] { return runtime::Runtime::get().host_kernels(); });
  // Tests: the multiply-adds from which convolutions take the host kernel; returns the old value.
  m.def("_set_host_conv_min_macs", [](double macs) { return host_aten::set_host_conv_min_macs(macs); });
  // Tests and A/B runs: the multiply-adds from which LSTM layers take the host kernel; returns the old value.
  m.def("_set_host_lstm_min_macs", [](double macs) { return host_aten::set_host_lstm_min_macs(macs); });
  // Tests: how many host_aten kernel blocks were spread over XLA's intra-op pool and over our own.
  m.def("_host_kernel_block_counts", [] {
    const host_aten::BlockCounts c = host_aten::block_counts();
    py::dict d;
    d["xla_pool"] = c.xla_pool;
    d["own_pool"] = c.own_pool;
    return d;
  });
  m.def("_run_custom_kernel",
        [](const std::string& symbol, const std::vector<at::Tensor>& inputs,
           const std::vector<std::vector<int64_t>>& out_shapes, const std::vector<at::ScalarType>& out_dtypes,
           const std::vector<std::optional<at::Tensor>>& targets) {
          return run_custom_kernel(symbol, inputs, out_shapes, out_dtypes, targets);
        },
        py::arg("symbol"), py::arg("inputs"), py::arg("out_shapes"),
        py::arg("out_dtypes"), py::arg("targets") = std::vector<std::optional<at::Tensor>>{});
  // The ranks meet inside: the GIL is released for the other ranks' threads.
  m.def("_run_custom_kernel_over_group", &run_custom_kernel_over_group, py::arg("backend"), py::arg("symbol"),
        py::arg("inputs"), py::arg("out_shapes"), py::arg("out_dtypes"),
        py::arg("targets") = std::vector<std::optional<at::Tensor>>{}, py::call_guard<py::gil_scoped_release>());
}

}  // namespace tpu::python
