#include "compile/compiled_graph.h"

#include <c10/core/DeviceGuard.h>

#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include "aten/tensor_access.h"
#include "device/allocator.h"
#include "exec/execution_mode.h"
#include "exec/replica_group.h"
#include "profiler/trace_hooks.h"
#include "runtime/launch_queue.h"
#include "runtime/runtime.h"

namespace tpu::compile {
namespace {

std::atomic<uint64_t> wait_ns{0};

constexpr const char* kLabel = "a compiled graph (torch.compile backend \"tpu\")";

// A new tpu storage of `nbytes` holding `buffer` (device::allocator() makes its DeviceStorage
// on the current device, which run() sets once).
c10::Storage storage_holding(size_t nbytes, std::shared_ptr<pjrt::Buffer> buffer,
                             const hlo::TensorType& type) {
  device::TpuAllocator& alloc = device::allocator();
  c10::DataPtr data = alloc.allocate(nbytes);
  if (buffer != nullptr) {
    static_cast<runtime::DeviceStorage*>(data.get_context())->set_contents(std::move(buffer), type, kLabel);
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                            std::move(data), &alloc, /*resizable=*/true));
}

// An output tensor straight on `storage`: no dispatch, no view metadata (like Inductor's
// reinterpret_tensor; AOTAutograd regenerates the views it must from their bases itself).
at::Tensor tensor_on(c10::Storage storage, at::ScalarType dtype, at::IntArrayRef sizes,
                     at::IntArrayRef strides, int64_t offset, bool contiguous) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::scalarTypeToTypeMeta(dtype));
  if (contiguous) {
    t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  } else {
    t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  }
  return t;
}

// An output aliasing input `base` with the captured geometry, made without dispatch (no
// as_strided per output per replay). It shares the base's storage and version counter, so
// autograd still sees an in-place change of the base made before the backward reads it;
// AOTAutograd rebuilds the aliases it returns to the user from their bases itself.
at::Tensor alias_of(const at::Tensor& base, at::IntArrayRef sizes, at::IntArrayRef strides, int64_t offset) {
  c10::TensorImpl* b = base.unsafeGetTensorImpl();
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(b->storage()),
                                                   b->key_set(), b->dtype());
  impl->set_sizes_and_strides(sizes, strides, offset);
  impl->set_version_counter(b->version_counter());
  return at::Tensor(std::move(impl));
}

// Whether `t` is exactly the view `v`, read straight from the tensor (no View built per replay;
// the bounds check view_of makes is implied: `v` fitted this storage size at capture).
bool is_view(const at::Tensor& t, const exec::View& v) {
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  return aten::element_type(t.scalar_type()) == v.dtype && t.storage_offset() == v.offset &&
         std::equal(sizes.begin(), sizes.end(), v.sizes.begin(), v.sizes.end()) &&
         std::equal(strides.begin(), strides.end(), v.strides.begin(), v.strides.end());
}

}  // namespace

CompiledGraph::CompiledGraph(exec::CapturedProgram program, const std::vector<at::Tensor>& inputs,
                             const std::vector<at::Tensor>& outputs)
    : program_(std::move(program)) {
  auto fail = [this](std::string why) { refuse(std::move(why)); };
  // A cut recording is the cause of whatever else does not fit below (an output a collective
  // outside the graph made, say): its reason comes first.
  if (!program_.complete) {
    fail(!program_.cut_reason.empty()
             ? program_.cut_reason
             : "its recording was interrupted: an op read device data on the host or wrote host data into a "
               "device tensor (e.g. an op that falls back to the CPU)");
  }
  if (!program_.scalars_fixed) fail("the graph draws random numbers (its RNG seed and offset change per call)");

  std::unordered_map<runtime::DeviceStorage*, int> input_of;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    InputSpec spec;
    if (!t.is_privateuseone()) {
      if (!t.is_cpu()) fail("input " + std::to_string(i) + " is a " + t.device().str() + " tensor");
      spec.on_host = true;
      inputs_.push_back(spec);
      continue;
    }
    if (program_.device < 0) program_.device = aten::tpu_index(t);  // a graph with no device work
    if (aten::tpu_index(t) != program_.device) fail("inputs on several devices");
    spec.view = aten::view_of(t);
    runtime::DeviceStorage* s = &aten::storage(t);
    spec.nbytes = s->nbytes();
    auto [it, inserted] = input_of.emplace(s, static_cast<int>(i));
    if (!inserted) spec.same_storage_as = it->second;
    inputs_.push_back(std::move(spec));
  }
  std::unordered_set<runtime::DeviceStorage*> written;
  for (const auto& out : program_.outputs) written.insert(out.storages.begin(), out.storages.end());
  for (auto& p : program_.params) {
    auto it = input_of.find(p.storage);
    if (it == input_of.end()) {
      // A constant (uploaded from the host while recording): replays read the same buffer.
      if (written.count(p.storage)) fail("the graph overwrites a device tensor that is not one of its inputs");
      param_input_.push_back(-1);
    } else {
      param_input_.push_back(it->second);
      p.buffer.reset();  // read from the input's storage on every run
    }
    p.storage = nullptr;
  }
  std::unordered_map<runtime::DeviceStorage*, int> fresh_of;
  for (size_t k = 0; k < program_.outputs.size(); ++k) {
    write_back_.emplace_back();
    for (runtime::DeviceStorage* s : program_.outputs[k].storages) {
      auto in = input_of.find(s);
      if (in != input_of.end()) {
        write_back_.back().push_back(in->second);
      } else if (!fresh_of.count(s)) {
        fresh_of[s] = static_cast<int>(fresh_.size());
        fresh_.push_back(FreshStorage{static_cast<int>(k), at::kByte, s->nbytes()});
      }
    }
  }
  for (const at::Tensor& t : outputs) {
    OutputSpec spec;
    if (!t.is_privateuseone()) {
      fail("an output is a " + t.device().str() + " tensor");
      outputs_.push_back(spec);
      continue;
    }
    spec.dtype = t.scalar_type();
    spec.sizes = t.sizes().vec();
    spec.strides = t.strides().vec();
    spec.offset = t.storage_offset();
    runtime::DeviceStorage* s = &aten::storage(t);
    spec.nbytes = s->nbytes();
    if (auto in = input_of.find(s); in != input_of.end()) {
      spec.source = OutputSpec::Source::kInput;
      spec.index = in->second;
      // The graph returns one of its inputs as it is (AOTAutograd saves parameters for the
      // backward this way): a replay returns that input too, as running the graph would.
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
          spec.index = static_cast<int>(i);
          spec.same_tensor = true;
          break;
        }
      }
      if (inputs[spec.index].scalar_type() != spec.dtype) fail("an output views an input as another dtype");
    } else if (auto fr = fresh_of.find(s); fr != fresh_of.end()) {
      spec.source = OutputSpec::Source::kProgram;
      spec.index = fr->second;
      FreshStorage& f = fresh_[fr->second];
      ++f.users;
      if (!f.used || f.dtype == spec.dtype) {
        f.dtype = spec.dtype;
        f.used = true;
      } else {
        fail("two outputs view one storage as different dtypes");
      }
      if (spec.nbytes % t.element_size() != 0) fail("an output's storage size is not a whole number of elements");
    } else if (s->current_contents().buffer == nullptr) {
      spec.source = OutputSpec::Source::kEmpty;
      if (spec.nbytes % t.element_size() != 0) fail("an output's storage size is not a whole number of elements");
    } else {
      fail("an output is a device tensor the graph neither reads nor writes");
    }
    outputs_.push_back(std::move(spec));
  }
  // An output that is its fresh storage's only view, whole and contiguous, is returned as the
  // base tensor itself (no view op per output on every run).
  for (size_t j = 0; j < outputs_.size(); ++j) {
    OutputSpec& spec = outputs_[j];
    if (spec.source != OutputSpec::Source::kProgram || fresh_[spec.index].users != 1) continue;
    const at::Tensor& t = outputs[j];
    if (spec.offset == 0 && t.is_contiguous() &&
        static_cast<size_t>(t.numel()) * t.element_size() == spec.nbytes) {
      spec.direct = true;
      fresh_[spec.index].shaped = true;
    }
  }
}

bool CompiledGraph::matches(const std::vector<at::Tensor>& inputs,
                            std::vector<runtime::DeviceStorage*>& storages) const {
  if (inputs.size() != inputs_.size()) return false;
  storages.resize(inputs.size());
  // Storages that must be distinct (sorted below): cheaper than a hash set per call.
  thread_local std::vector<runtime::DeviceStorage*> distinct;
  distinct.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    const InputSpec& spec = inputs_[i];
    if (spec.on_host) {
      if (!t.is_cpu()) return false;
      storages[i] = nullptr;
      continue;
    }
    if (!t.is_privateuseone() || aten::tpu_index(t) != program_.device) return false;
    runtime::DeviceStorage* s = &aten::storage(t);
    if (s->nbytes() != spec.nbytes || !is_view(t, spec.view)) return false;
    if (spec.same_storage_as >= 0) {
      if (s != storages[spec.same_storage_as]) return false;
    } else {
      distinct.push_back(s);
    }
    storages[i] = s;
  }
  std::sort(distinct.begin(), distinct.end());
  return std::adjacent_find(distinct.begin(), distinct.end()) == distinct.end();
}

std::optional<std::vector<at::Tensor>> CompiledGraph::run(const std::vector<at::Tensor>& inputs) const {
  // Compiled for a process group that is gone: capture again for the current one.
  if (program_.collectives.group != nullptr && program_.collectives.group->closed()) return std::nullopt;
  TORCH_CHECK(replayable(), "torch_tpu: this compiled graph cannot be replayed: ", reason_);
  profiler::HostSpan span("replay");
  thread_local std::vector<runtime::DeviceStorage*> storages;  // reused: no allocation per call
  if (!matches(inputs, storages)) return std::nullopt;
  std::vector<std::shared_ptr<pjrt::Buffer>> params;
  params.reserve(program_.params.size());
  for (size_t p = 0; p < program_.params.size(); ++p) {
    if (param_input_[p] < 0) {
      params.push_back(program_.params[p].buffer);
      continue;
    }
    std::shared_ptr<pjrt::Buffer> b = storages[param_input_[p]]->buffer_if(program_.params[p].type);
    if (b == nullptr) return std::nullopt;
    params.push_back(std::move(b));
  }
  // An argument still promised by a queued eager launch: let the launcher hand those to PJRT
  // first (timed apart - on the XLA CPU plugin that is the earlier ops' own run time).
  if (std::any_of(params.begin(), params.end(), [](const auto& b) { return b->unresolved(); })) {
    const auto start = std::chrono::steady_clock::now();
    runtime::LaunchQueue::get().drain();
    wait_ns.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start).count()),
                      std::memory_order_relaxed);
  }
  std::vector<std::shared_ptr<pjrt::Buffer>> buffers;
  if (program_.exe != nullptr) {
    buffers = exec::run_program(program_.exe, program_.device, std::move(params), program_.scalars,
                                program_.donatable_params, kLabel, program_.collectives);
  }
  for (size_t k = 0; k < write_back_.size(); ++k) {
    for (int i : write_back_[k]) storages[i]->set_contents(buffers[k], program_.outputs[k].type, kLabel);
  }
  // New storages are made on the graph's device (one guard per call, not per output).
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(program_.device)));
  std::vector<c10::Storage> fresh(fresh_.size());
  for (size_t f = 0; f < fresh_.size(); ++f) {
    const FreshStorage& spec = fresh_[f];
    if (spec.used && !spec.shaped) {
      fresh[f] = storage_holding(spec.nbytes, buffers[spec.program_output], program_.outputs[spec.program_output].type);
    }
  }
  std::vector<at::Tensor> out;
  out.reserve(outputs_.size());
  for (const OutputSpec& spec : outputs_) {
    switch (spec.source) {
      case OutputSpec::Source::kInput:
        out.push_back(spec.same_tensor ? inputs[spec.index]
                                       : alias_of(inputs[spec.index], spec.sizes, spec.strides, spec.offset));
        break;
      case OutputSpec::Source::kProgram:
        if (spec.direct) {
          const FreshStorage& f = fresh_[spec.index];
          out.push_back(tensor_on(storage_holding(f.nbytes, buffers[f.program_output],
                                                  program_.outputs[f.program_output].type),
                                  spec.dtype, spec.sizes, spec.strides, 0, /*contiguous=*/true));
        } else {
          out.push_back(tensor_on(fresh[spec.index], spec.dtype, spec.sizes, spec.strides, spec.offset, false));
        }
        break;
      case OutputSpec::Source::kEmpty:
        out.push_back(tensor_on(storage_holding(spec.nbytes, nullptr, {}), spec.dtype, spec.sizes,
                                spec.strides, spec.offset, false));
        break;
    }
  }
  if (exec::eager_mode() == exec::EagerMode::kDebug) runtime::Runtime::get().tracker(program_.device).synchronize();
  return out;
}

uint64_t launch_wait_ns() { return wait_ns.load(std::memory_order_relaxed); }

}  // namespace tpu::compile
