#include "exec/fused_graph.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "exec/background_compiles.h"
#include "exec/execution_mode.h"
#include "exec/zero_fill.h"
#include "hlo/builder.h"
#include "profiler/trace_hooks.h"
#include "runtime/runtime.h"

namespace tpu::exec {

namespace {


constexpr size_t kDefaultMaxOps = 5000;
// A repeat of the first op closes the graph only after this many ops, so a loop of a few
// identical ops still fuses into graphs of several.
constexpr size_t kMinOpsBeforeRepeat = 8;
// A flush for a host read is split only when the rest has at least this many ops: less has
// nothing to overlap with and would cost a second launch.
constexpr size_t kMinSplitOps = 8;
// Label of fused executions in device errors.
constexpr const char* kGraphLabel =
    "a fused graph (Fused Eager; rerun with TPU_LAUNCH_BLOCKING=1 to find the failing op)";

size_t max_ops_from_env() {
  const char* v = std::getenv("TORCH_TPU_FUSE_MAX_OPS");
  if (v == nullptr || *v == '\0') return kDefaultMaxOps;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n > 0) ? static_cast<size_t>(n) : kDefaultMaxOps;
}

template <typename T>
void put(std::string& key, T v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

bool FusedGraph::OpMark::is_op(const std::string& op) const {
  return light.size() > op.size() && light[op.size()] == '\0' && light.compare(0, op.size(), op) == 0;
}

bool FusedGraph::OpMark::repeats(const OpMark& first) const {
  if (light != first.light || inputs.size() != first.inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == first.inputs[i]) continue;
    if (!(is_new[i] && first.is_new[i])) return false;
  }
  return true;
}

FusedStats& FusedStats::operator+=(const FusedStats& o) {
  ops_recorded += o.ops_recorded;
  graphs_run += o.graphs_run;
  graph_compiles += o.graph_compiles;
  graph_replays += o.graph_replays;
  flushes_by_repeat += o.flushes_by_repeat;
  flushes_by_size += o.flushes_by_size;
  split_reads += o.split_reads;
  collectives_recorded += o.collectives_recorded;
  graphs_with_collectives += o.graphs_with_collectives;
  patterns_timed += o.patterns_timed;
  patterns_strict += o.patterns_strict;
  patterns_pending += o.patterns_pending;
  ops_run_strictly += o.ops_run_strictly;
  return *this;
}

FusedGraph::FusedGraph() : programs_(ProgramCache::get()), max_ops_(max_ops_from_env()) {}

FusedGraph::~FusedGraph() = default;

FusedStats FusedGraph::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  FusedStats s = stats_;
  s.ops_recorded += static_cast<int64_t>(pending_ops_.load(std::memory_order_relaxed));  // not yet counted
  return s;
}

void FusedGraph::count(int64_t FusedStats::*field) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++(stats_.*field);
}

bool FusedGraph::holds_collectives() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return group_ != nullptr;
}

size_t FusedGraph::pending_ops() const { return pending_ops_.load(std::memory_order_relaxed); }

FusedGraph::OpMark FusedGraph::mark_of(const OpCall& call) const {
  OpMark m;
  m.light = call.op;
  m.light.push_back('\0');
  call.attrs.append_to_key(m.light);
  for (const Input& in : call.inputs) {
    if (in.kind == Input::Kind::kScalar) {
      put<uint8_t>(m.light, 0xff);
      continue;
    }
    put<uint8_t>(m.light, static_cast<uint8_t>(in.view.dtype));
    for (int64_t d : in.view.sizes) put<int64_t>(m.light, d);
    m.inputs.push_back(in.storage);
    m.is_new.push_back(tracked_.count(in.storage) == 0);
  }
  put<uint8_t>(m.light, static_cast<uint8_t>(call.outputs.size()));
  return m;
}

int FusedGraph::new_value(hlo::TensorType type, int param) {
  values_.push_back(Value{std::move(type), param});
  return static_cast<int>(values_.size()) - 1;
}

CallLayout::Slot FusedGraph::slot_of(runtime::DeviceStorage* s) {
  auto it = tracked_.find(s);
  if (it != tracked_.end()) {
    return CallLayout::Slot{s, {nullptr, values_[it->second.value].type}, true};
  }
  runtime::DeviceStorage::Contents c = s->current_contents();
  if (c.buffer == nullptr) return CallLayout::Slot{s, {}, false};
  const int value = new_value(c.type, static_cast<int>(params_.size()));
  param_of_[s] = static_cast<int>(params_.size());
  params_.push_back(Param{std::move(c.buffer), s, value});
  tracked_[s] = Tracked{value, false};
  s->mark_tracked(false);
  return CallLayout::Slot{s, {nullptr, c.type}, true};
}

void FusedGraph::cut_at_repeat_locked(const OpCall& call) {
  // The full mark is built only for an op of the first op's kind (and for a graph's first op).
  if (!capturing_ && nodes_.size() >= (continuing_ ? 1 : kMinOpsBeforeRepeat) &&
      first_.is_op(call.op) && mark_of(call).repeats(first_)) {
    count(&FusedStats::flushes_by_repeat);
    flush_locked();
  }
}

void FusedGraph::reset_advisor() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  advisor_ = FuseAdvisor();
  advise_ = FuseAdvisor::enabled_by_env();
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  stats_.patterns_timed = stats_.patterns_strict = stats_.patterns_pending = 0;  // the verdicts are forgotten
  strict_ = false;
}

bool FusedGraph::diverts(const OpCall& call, bool owned) {
  if (!advise_.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (capturing_) return false;
  if (owned || group_ != nullptr || call.group != nullptr || owner_.load() != std::thread::id()) {
    advise_ = false;  // ranks must record the same ops: none may go its own way
    strict_ = false;
    std::lock_guard<std::mutex> stats_lock(stats_mu_);
    stats_.patterns_pending = 0;  // no verdict is coming
    return false;
  }
  // A strict stretch runs k iterations: up to the op with the candidate's mark that starts the
  // next one (within a cap on its ops, in case the loop changed).
  if (strict_) {
    bool stop = false;
    if (is_candidate(call)) {
      if (strict_marks_left_ == 0) {
        stop = true;  // this op starts the next iteration
      } else {
        --strict_marks_left_;
      }
    }
    if (--strict_ops_left_ < 0) stop = true;
    if (!stop) {
      count(&FusedStats::ops_run_strictly);
      return true;
    }
    strict_ = false;
  }
  cut_at_repeat_locked(call);
  if (!nodes_.empty() || continuing_) return false;
  const auto seconds = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const uint64_t mark = mark_hash(call);
  FuseAdvisor::Now now;
  now.seconds = seconds();
  if (advisor_.boundary(mark, now.seconds)) {
    runtime::Runtime::get().tracker(call.device).synchronize();
    now.seconds = seconds();
  }
  const cache::CacheStats cs = programs_.executables().stats();
  now.compiles = cs.compiles + cs.disk_loads;
  now.epoch = mode_changes();
  const int64_t strict = advisor_.start(mark, now);
  if (mark == advisor_.candidate()) candidate_op_ = call.op;
  {
    std::lock_guard<std::mutex> stats_lock(stats_mu_);
    stats_.patterns_timed = advisor_.stats().patterns_timed;
    stats_.patterns_strict = advisor_.stats().patterns_strict;
    stats_.patterns_pending = advisor_.stats().patterns_pending;
  }
  if (strict <= 0) return false;
  strict_ = true;
  strict_marks_left_ = strict * advisor_.marks_per_iteration() - 1;  // this op is the first
  strict_ops_left_ = 2 * strict * advisor_.ops_per_iteration() + 64;
  count(&FusedStats::ops_run_strictly);
  return true;
}

uint64_t FusedGraph::mark_hash(const OpCall& call) const { return cache::fingerprint(mark_of(call).light).hi; }

bool FusedGraph::is_candidate(const OpCall& call) const {
  return call.op == candidate_op_ && mark_hash(call) == advisor_.candidate();
}

std::vector<FreshOutput> FusedGraph::record(OpCall call, bool owned) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // One group per graph: a collective of another group starts a new graph (on every rank alike).
  if (call.group != nullptr && group_ != nullptr && group_.get() != call.group) flush_locked();
  if (!nodes_.empty() && (call.device != device_ || (!capturing_ && nodes_.size() >= max_ops_))) {
    if (call.device == device_) {
      // Cut by the size limit: the next graph continues the same iteration, so the repeat
      // detector keeps waiting for the iteration's first op (graphs then start at the same
      // points of every iteration and are compiled once).
      count(&FusedStats::flushes_by_size);
      OpMark start = std::move(first_);
      flush_locked();
      first_ = std::move(start);
      continuing_ = true;
    } else {
      flush_locked();
    }
  }
  cut_at_repeat_locked(call);
  std::optional<OpMark> first_mark;
  if (nodes_.empty() && !continuing_) first_mark = mark_of(call);  // before layout_of tracks inputs
  const auto slot_fn = [this](runtime::DeviceStorage* s) { return slot_of(s); };
  CallLayout layout = layout_of(call, slot_fn);
  auto missing = unmaterialized(layout);
  if (!missing.empty()) {
    for (runtime::DeviceStorage* s : missing) {  // zero fills, recorded like any op
      std::vector<FreshOutput> zeros = record(zero_fill_call(call, *s));
      bind(s, zeros[0].pending);
    }
    layout = layout_of(call, slot_fn);
  }
  std::string& sig = sig_;  // reused: its capacity saves an allocation or more per op
  signature_into(call, layout, sig);
  std::shared_ptr<const OpProgram> program = programs_.op_program(call, layout, sig);

  if (nodes_.empty()) {
    device_ = call.device;
    if (!continuing_) first_ = first_mark ? std::move(*first_mark) : mark_of(call);
  }
  Node node;
  node.call = std::move(call);
  node.layout = std::move(layout);
  for (auto& slot : node.layout.slots) {
    node.slot_values.push_back(tracked_.at(slot.storage).value);
    slot.storage = nullptr;  // the graph refers to values, not storages
  }
  put<uint32_t>(key_, static_cast<uint32_t>(sig.size()));
  key_ += sig;
  if (bake_) {
    for (const ProgramPlan::Arg& arg : program->plan.args) {
      if (arg.kind == ProgramPlan::Arg::Kind::kSlot) continue;
      const ScalarValue v = runtime_value(node.call, arg);
      key_.push_back(v.cacheable ? 'c' : 'r');
      if (v.cacheable) key_ += v.bytes();
    }
  }
  for (int v : node.slot_values) put<int32_t>(key_, v);

  std::vector<FreshOutput> fresh;
  fresh.reserve(node.call.outputs.size());
  for (size_t i = 0; i < node.call.outputs.size(); ++i) {
    const hlo::TensorType& type = program->plan.output_types[i];
    const int value = new_value(type, -1);
    node.out_values.push_back(value);
    if (node.call.outputs[i]) {
      runtime::DeviceStorage* s = node.call.outputs[i]->storage;
      tracked_[s] = Tracked{value, true};
      s->mark_tracked(true);
    } else {
      FreshOutput out;
      out.type = type;
      out.pending = (generation_ << 32) | value;
      unbound_.push_back(value);
      fresh.push_back(std::move(out));
    }
  }
  for (Input& in : node.call.inputs) in.storage = nullptr;
  for (auto& out : node.call.outputs) {
    if (out) out->storage = nullptr;
  }
  if (node.call.group != nullptr) {
    if (group_ == nullptr) group_ = node.call.group->shared_from_this();
    count(&FusedStats::collectives_recorded);
  }
  if ((owned || capturing_ || group_ != nullptr) && owner_.load(std::memory_order_relaxed) == std::thread::id()) {
    owner_.store(std::this_thread::get_id(), std::memory_order_release);
  }
  nodes_.push_back(std::move(node));
  pending_ops_.store(nodes_.size(), std::memory_order_relaxed);  // counted in ops_recorded at reset
  if (advise_.load(std::memory_order_relaxed) && !capturing_) advisor_.recorded(is_candidate(nodes_.back().call));
  return fresh;
}

void FusedGraph::bind(runtime::DeviceStorage* storage, int64_t pending) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const int value = static_cast<int>(pending & 0xffffffff);
  if ((pending >> 32) != generation_) {
    // Its graph was flushed (by another thread) before this bind: the value is computed.
    auto it = orphans_.find(pending);
    if (it == orphans_.end()) {
      throw std::logic_error("torch_tpu: internal error: a pending value of a flushed graph is lost");
    }
    storage->set_contents(std::move(it->second.first), it->second.second, kGraphLabel);
    orphans_.erase(it);
    return;
  }
  unbound_.erase(std::remove(unbound_.begin(), unbound_.end(), value), unbound_.end());
  tracked_[storage] = Tracked{value, true};
  storage->mark_tracked(true);
}

void FusedGraph::forget(runtime::DeviceStorage* storage, bool destroyed) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (capturing_ && !destroyed) capture_cut_ = true;
  tracked_.erase(storage);
  if (auto it = param_of_.find(storage); it != param_of_.end()) {
    params_[it->second].storage = nullptr;
    param_of_.erase(it);
  }
  storage->untrack();
}

void FusedGraph::host_read() {
  if (!capturing_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (capturing_) capture_cut_ = true;
}

void FusedGraph::set_capturing(bool on, bool bake) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (on) {
    advisor_.interrupt();  // a capture is no iteration of the loop around it
    strict_ = false;
  }
  if (on) {
    capture_cut_ = false;
    capture_cut_why_.clear();
  }
  capturing_ = on;
  bake_ = on && bake;
}

bool FusedGraph::capturing() const { return capturing_.load(std::memory_order_acquire); }

void FusedGraph::cut_capture(const std::string& why) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!capturing_) return;
  capture_cut_ = true;
  if (capture_cut_why_.empty()) capture_cut_why_ = why;
}

CapturedProgram FusedGraph::flush_captured() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  CapturedProgram captured;
  captured.complete = !capture_cut_;
  captured.cut_reason = capture_cut_why_;
  flush_locked(&captured);
  return captured;
}

std::optional<cache::Fingerprint> FusedGraph::flush_captured_in_background() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (capture_cut_ || nodes_.empty()) {
    reset_locked();
    return std::nullopt;
  }
  std::vector<std::pair<int, runtime::DeviceStorage*>> live;
  std::vector<int> outputs, aliases;
  finish_key_locked(live, outputs, aliases);
  const GraphPart whole = whole_locked(std::move(outputs), std::move(aliases));
  const cache::Fingerprint fp = cache::fingerprint(key_);  // what flush_captured() will look up
  BackgroundCompiles& background = BackgroundCompiles::get();
  if (programs_.find_graph(fp) != nullptr) {
    background.known(fp);
  } else {
    count(&FusedStats::graph_compiles);
    auto source = std::make_shared<GraphSource>(describe_locked(whole, "a fused graph"));
    // The options in force now, while the recorded ops' signatures carry the same settings.
    auto options = std::make_shared<pjrt::CompileOptions>(programs_.compile_options(source->program->replica_devices));
    ProgramCache* programs = &programs_;
    background.submit(fp, [programs, fp, source, options] {
      source->program->exe = programs->compile(source->mlir, source->what, *options);
      programs->add_graph(fp, source->program);
    });
  }
  // Nothing ran: the storages the capture wrote keep the contents they had before it.
  reset_locked();
  return fp;
}

void FusedGraph::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  flush_locked();
}

void FusedGraph::flush_unless_foreign() {
  const auto foreign = [this] {
    const std::thread::id owner = owner_.load(std::memory_order_acquire);
    return owner != std::thread::id() && owner != std::this_thread::get_id();
  };
  // Never wait on the lock while the graph may become another thread's: that thread can take the
  // lock, record a collective and hold the lock while it meets the other ranks - one of which may
  // be this thread, waiting here. So: try the lock, and look again whose the graph is between tries.
  std::unique_lock<std::recursive_mutex> lock(mu_, std::defer_lock);
  for (int tries = 0;; ++tries) {
    if (foreign()) return;
    if (lock.try_lock()) break;
    if (tries < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // the holder may be compiling
    }
  }
  if (foreign()) return;
  flush_locked();
}

void FusedGraph::reset_locked() {
  for (auto& [storage, t] : tracked_) storage->untrack();
  tracked_.clear();
  unbound_.clear();
  ++generation_;
  values_.clear();
  params_.clear();
  param_of_.clear();
  {
    // The graph's ops join ops_recorded once, here, instead of taking the stats lock per op.
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.ops_recorded += static_cast<int64_t>(nodes_.size());
    pending_ops_.store(0, std::memory_order_relaxed);
  }
  nodes_.clear();
  key_.clear();
  first_ = OpMark{};
  continuing_ = false;
  group_.reset();
  owner_.store(std::thread::id(), std::memory_order_release);
}

std::shared_ptr<const GraphProgram> FusedGraph::build_locked(const GraphPart& part,
                                                             const std::string& kind) {
  GraphSource source = describe_locked(part, kind);
  source.program->exe = programs_.compile(source.mlir, source.what, source.program->replica_devices);
  return source.program;
}

FusedGraph::GraphSource FusedGraph::describe_locked(const GraphPart& part, const std::string& kind) {
  auto program = std::make_shared<GraphProgram>();
  hlo::Builder b;
  if (group_ != nullptr) {  // one replica per device of the group
    program->replica_devices = group_->devices();
    b.set_num_replicas(static_cast<int64_t>(program->replica_devices.size()));
  }
  std::vector<hlo::Value> value_of(values_.size());
  for (int v : part.inputs) value_of[v] = b.parameter(values_[v].type);
  for (int j : part.nodes) {
    const Node& node = nodes_[j];
    std::vector<hlo::Value> slots;
    for (int v : node.slot_values) slots.push_back(value_of[v]);
    auto emitted = emit_call(b, node.call, node.layout, slots,
                             [&](const hlo::TensorType& t, ProgramPlan::Arg arg) {
                               if (bake_) {
                                 const ScalarValue v = runtime_value(node.call, arg);
                                 if (v.cacheable) {
                                   return is_floating(v.dtype) ? b.constant(v.dtype, v.f)
                                                               : b.constant_int(v.dtype, v.i);
                                 }
                               }
                               program->runtime_args.emplace_back(j, arg);
                               return b.parameter(t);
                             });
    for (size_t i = 0; i < emitted.size(); ++i) value_of[node.out_values[i]] = emitted[i].value;
  }
  std::vector<hlo::Value> results;
  for (size_t k = 0; k < part.outputs.size(); ++k) {
    results.push_back(value_of[part.outputs[k]]);
    if (part.aliases[k] >= 0) {
      b.alias_parameter_to_output(value_of[part.inputs[part.aliases[k]]], static_cast<int>(k));
      program->donatable_params.push_back(part.aliases[k]);
    }
  }
  const std::string what = kind + " of " + std::to_string(part.nodes.size()) + " ops";
  const std::string mlir = b.module_text(results);
  // Shape churn: the graph's structure (first ops, op count, input dtypes and ranks) against
  // the input shapes it was compiled for.
  std::string group = kind + " starting with ";
  for (size_t j = 0; j < part.nodes.size() && j < 3; ++j) {
    group += std::string(j ? ", " : "") + nodes_[part.nodes[j]].call.label;
  }
  group += " (" + std::to_string(part.nodes.size()) + " ops; inputs";
  std::string shapes;
  for (size_t p = 0; p < part.inputs.size(); ++p) {
    const hlo::TensorType& t = values_[part.inputs[p]].type;
    group += std::string(p ? ", " : " ") + display_name(t.dtype) + "[rank " + std::to_string(t.dims.size()) + "]";
    if (p < 6) shapes += std::string(p ? ", " : "") + hlo::dims_str(t.dims);
  }
  if (part.inputs.size() > 6) shapes += ", ...";
  programs_.churn().note_compile(group + ")", shapes);
  return {std::move(program), mlir, what};
}

std::shared_ptr<const GraphProgram> FusedGraph::program_locked(const cache::Fingerprint& fp,
                                                               const GraphPart& part,
                                                               const std::string& kind,
                                                               bool* compiled) {
  std::shared_ptr<const GraphProgram> program = programs_.find_graph(fp);
  if (program != nullptr) {
    if (profiler::tracing()) profiler::sink().cache_hit(kGraphLabel, "graph");
    return program;
  }
  program = build_locked(part, kind);
  programs_.add_graph(fp, program);
  count(&FusedStats::graph_compiles);
  *compiled = true;
  return program;
}

std::vector<std::shared_ptr<pjrt::Buffer>> FusedGraph::run_part_locked(
    const GraphProgram& program, const GraphPart& part,
    std::vector<std::shared_ptr<pjrt::Buffer>>& buffers, const std::vector<bool>& keep,
    const GroupLaunch& collectives) {
  std::vector<std::shared_ptr<pjrt::Buffer>> params;
  params.reserve(part.inputs.size());
  // Moved out unless a later part reads it too: the donation check counts references.
  for (int v : part.inputs) params.push_back(keep[v] ? buffers[v] : std::move(buffers[v]));
  std::vector<std::shared_ptr<pjrt::Buffer>> scalars;
  for (const auto& [node, arg] : program.runtime_args) {
    scalars.push_back(programs_.scalar(device_, runtime_value(nodes_[node].call, arg)));
  }
  return run_program(program.exe, device_, std::move(params), std::move(scalars),
                     program.donatable_params, kGraphLabel, collectives);
}

void FusedGraph::flush_for(const runtime::DeviceStorage* storage) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (group_ != nullptr && owner_.load() != std::this_thread::get_id()) {
    throw std::runtime_error(
        "torch_tpu: a tensor is read on a thread other than the rank's that computes it in a program "
        "with collectives (spmd_safe or torch.compile), before that rank ran the program. Fix: read it "
        "on the rank's own thread, or after the rank has left its spmd_safe region");
  }
  auto it = tracked_.find(const_cast<runtime::DeviceStorage*>(storage));
  flush_locked(nullptr, it != tracked_.end() && it->second.pending ? it->second.value : -1);
}

GraphPart FusedGraph::whole_locked(std::vector<int> outputs, std::vector<int> aliases) const {
  GraphPart whole;
  for (size_t j = 0; j < nodes_.size(); ++j) whole.nodes.push_back(static_cast<int>(j));
  for (const Param& p : params_) whole.inputs.push_back(p.value);
  whole.outputs = std::move(outputs);
  whole.aliases = std::move(aliases);  // parameter index = input index
  return whole;
}

void FusedGraph::finish_key_locked(std::vector<std::pair<int, runtime::DeviceStorage*>>& live,
                                   std::vector<int>& outputs, std::vector<int>& aliases) {
  // Outputs: the newest value of every live storage the graph wrote, in value order.
  for (const auto& [storage, t] : tracked_) {
    if (t.pending) live.emplace_back(t.value, storage);
  }
  for (int value : unbound_) live.emplace_back(value, nullptr);
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  });
  const auto& param_of_storage = param_of_;
  std::vector<bool> param_aliased(params_.size(), false);
  // key_ (the ops, appended while recording) is completed in place: the graph is reset after
  // its flush whatever happens, and a copy of a long graph's key per flush is not free.
  std::string& key = key_;
  key.push_back(bake_ ? '\xfe' : '\xff');
  for (const Param& p : params_) {
    put<uint8_t>(key, static_cast<uint8_t>(values_[p.value].type.dtype));
    for (int64_t d : values_[p.value].type.dims) put<int64_t>(key, d);
    key.push_back('|');
  }
  for (const auto& [value, storage] : live) {
    if (!outputs.empty() && outputs.back() == value) continue;
    int alias = -1;
    auto it = storage ? param_of_storage.find(storage) : param_of_storage.end();
    if (it != param_of_storage.end() && !param_aliased[it->second] &&
        values_[params_[it->second].value].type == values_[value].type) {
      alias = it->second;
      param_aliased[alias] = true;
    }
    outputs.push_back(value);
    aliases.push_back(alias);
    put<int32_t>(key, value);
    put<int32_t>(key, alias);
  }
}

void FusedGraph::flush_locked(CapturedProgram* captured, int read_value) {
  if (capturing_) capture_cut_ = true;
  if (nodes_.empty()) {
    reset_locked();
    return;
  }
  profiler::HostSpan span("flush");
  std::vector<std::pair<int, runtime::DeviceStorage*>> live;
  std::vector<int> outputs;   // value ids
  std::vector<int> aliases;   // per output: the param whose buffer it may take, or -1
  finish_key_locked(live, outputs, aliases);
  std::string& key = key_;

  // A flush for a host read may run as two programs: the read value's dependencies, then the
  // rest right behind it (graph_split.h). Each part's key is the whole graph's plus the read
  // value, so every iteration finds the same two programs.
  std::optional<GraphSplit> split;
  if (read_value >= 0 && captured == nullptr && !capturing_ && group_ == nullptr && split_reads_enabled()) {
    GraphShape shape;
    shape.num_values = values_.size();
    for (const Node& node : nodes_) {
      shape.reads.push_back(&node.slot_values);
      shape.writes.push_back(&node.out_values);
    }
    for (const Param& p : params_) shape.params.push_back(p.value);
    shape.outputs = outputs;
    shape.aliases = aliases;
    split = split_for_read(shape, read_value, kMinSplitOps);
  }
  std::vector<GraphPart> parts;
  std::vector<cache::Fingerprint> fps;
  std::vector<std::string> kinds;
  if (split) {
    key.push_back('\xfd');
    put<int32_t>(key, read_value);
    key.push_back('a');
    fps.push_back(cache::fingerprint(key));
    key.back() = 'b';
    fps.push_back(cache::fingerprint(key));
    parts.push_back(std::move(split->first));
    parts.push_back(std::move(split->rest));
    kinds = {"the read value's part of a fused graph", "the rest of a fused graph after a read"};
  } else {
    GraphPart whole = whole_locked(std::move(outputs), std::move(aliases));
    fps.push_back(cache::fingerprint(key));
    parts.push_back(std::move(whole));
    kinds = {"a fused graph"};
  }

  std::vector<std::shared_ptr<const GraphProgram>> programs;
  bool compiled = false;
  try {
    for (size_t i = 0; i < parts.size(); ++i) {
      programs.push_back(program_locked(fps[i], parts[i], kinds[i], &compiled));
    }
  } catch (...) {
    reset_locked();
    throw;
  }
  if (!compiled) count(&FusedStats::graph_replays);
  advisor_.flushed(fps[0].hi);
  GroupLaunch collectives;
  if (group_ != nullptr) {
    collectives.group = group_;
    collectives.signature = "the program " + fps[0].hex() + " (a fused graph of " + std::to_string(nodes_.size()) +
                            " ops with collectives)";
    count(&FusedStats::graphs_with_collectives);
  }

  // Buffers per value: the parameters' (the graph's sole extra references), then each part's
  // outputs as it is launched.
  std::vector<std::shared_ptr<pjrt::Buffer>> buffers(values_.size());
  for (Param& p : params_) buffers[p.value] = std::move(p.buffer);
  if (captured != nullptr) {
    const GraphProgram& program = *programs[0];
    captured->exe = program.exe;
    captured->device = device_;
    // A parameter the program may overwrite (donate) is not held here: the capture's own run
    // may then update it in place (a serving step's KV cache), and a replay reads it from its
    // input storage anyway (compile/compiled_graph.h refuses graphs that overwrite a constant).
    std::vector<bool> donatable(params_.size(), false);
    for (int p : program.donatable_params) donatable[p] = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      captured->params.push_back({params_[i].storage, donatable[i] ? nullptr : buffers[params_[i].value],
                                  values_[params_[i].value].type});
    }
    bool scalars_fixed = true;
    for (const auto& [node, arg] : program.runtime_args) {
      const ScalarValue v = runtime_value(nodes_[node].call, arg);
      scalars_fixed = scalars_fixed && v.cacheable;
      captured->scalars.push_back(programs_.scalar(device_, v));
    }
    captured->scalars_fixed = scalars_fixed;
    captured->donatable_params = program.donatable_params;
    captured->collectives = collectives;
    for (size_t i = 0; i < live.size(); ++i) {
      if (i == 0 || live[i].first != live[i - 1].first) {
        captured->outputs.push_back({values_[live[i].first].type, {}});
      }
      if (live[i].second != nullptr) captured->outputs.back().storages.push_back(live[i].second);
    }
  }
  // A value a later part reads stays in `buffers` when an earlier part takes it.
  std::vector<bool> keep(values_.size(), false);
  for (size_t i = 1; i < parts.size(); ++i) {
    for (int v : parts[i].inputs) keep[v] = true;
  }
  try {
    for (size_t i = 0; i < parts.size(); ++i) {
      std::vector<std::shared_ptr<pjrt::Buffer>> out =
          run_part_locked(*programs[i], parts[i], buffers, keep, collectives);
      for (size_t k = 0; k < out.size(); ++k) buffers[parts[i].outputs[k]] = std::move(out[k]);
    }
  } catch (...) {
    reset_locked();
    throw;
  }
  count(&FusedStats::graphs_run);
  if (split) count(&FusedStats::split_reads);
  for (const auto& [value, s] : live) {
    if (s == nullptr) {
      orphans_[(generation_ << 32) | value] = {buffers[value], values_[value].type};
      continue;
    }
    s->resolve(buffers[value], values_[value].type, kGraphLabel);
    s->untrack();
  }
  reset_locked();
}

}  // namespace tpu::exec
