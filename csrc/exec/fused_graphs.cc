#include "exec/fused_graphs.h"

#include <stdexcept>
#include <string>

#include "common/env_flag.h"
#include "exec/execution_mode.h"

namespace tpu::exec {

namespace {
thread_local int t_capture_device = -1;
thread_local int t_spmd_depth = 0;
}  // namespace

FusedGraphs::FusedGraphs() { runtime::set_pending_work(this); }

FusedGraphs::~FusedGraphs() {
  runtime::set_pending_work(nullptr);
  for (auto& g : graphs_) delete g.load();
}

FusedGraph& FusedGraphs::of(int device) {
  if (device < 0 || device >= kMaxDevices) {
    throw std::out_of_range("torch_tpu: device index " + std::to_string(device) + " is out of range");
  }
  FusedGraph* g = graphs_[device].load(std::memory_order_acquire);
  if (g != nullptr) return *g;
  std::lock_guard<std::mutex> lock(mu_);
  g = graphs_[device].load(std::memory_order_acquire);
  if (g == nullptr) {
    g = new FusedGraph();
    graphs_[device].store(g, std::memory_order_release);
  }
  return *g;
}

bool FusedGraphs::diverts(const OpCall& call) { return of(call.device).diverts(call, t_spmd_depth > 0); }

void FusedGraphs::reset_advisors() {
  each([](FusedGraph& g) { g.reset_advisor(); });
}

std::vector<FreshOutput> FusedGraphs::record(OpCall call) {
  note_other_device(call.device);
  const int device = call.device;
  return of(device).record(std::move(call), t_spmd_depth > 0);
}

template <typename F>
void FusedGraphs::each(F&& f) const {
  for (const auto& slot : graphs_) {
    if (FusedGraph* g = slot.load(std::memory_order_acquire)) f(*g);
  }
}

void FusedGraphs::flush() {
  each([](FusedGraph& g) { g.flush_unless_foreign(); });
}

void FusedGraphs::flush_device(int device) {
  if (device < 0 || device >= kMaxDevices) return flush();
  if (FusedGraph* g = graphs_[device].load(std::memory_order_acquire)) g->flush_unless_foreign();
}

bool FusedGraphs::pending_on(int device) const {
  if (device < 0 || device >= kMaxDevices) return false;
  const FusedGraph* g = graphs_[device].load(std::memory_order_acquire);
  return g != nullptr && g->pending_ops() > 0;
}

void FusedGraphs::flush_for(const runtime::DeviceStorage* storage) { of(storage->device()).flush_for(storage); }

void FusedGraphs::forget(runtime::DeviceStorage* storage, bool destroyed) {
  of(storage->device()).forget(storage, destroyed);
}

void FusedGraphs::host_read() {
  if (t_capture_device >= 0) of(t_capture_device).host_read();
}

void FusedGraphs::begin_capture(int device, bool bake) {
  FusedGraph& g = of(device);
  g.flush();
  g.set_capturing(true, bake);
  t_capture_device = device;
  set_thread_fused(true);
}

int FusedGraphs::capture_device() { return t_capture_device; }

void FusedGraphs::end_capture() {
  if (t_capture_device >= 0) of(t_capture_device).set_capturing(false);
  t_capture_device = -1;
  set_thread_fused(false);
}

void FusedGraphs::note_other_device(int device) {
  if (t_capture_device >= 0 && device != t_capture_device) of(t_capture_device).cut_capture();
}

void FusedGraphs::cut_capture_by_collective(const char* what, const char* how) {
  if (t_capture_device < 0) return;  // no capture: nothing to build
  of(t_capture_device).cut_capture(std::string("a collective (") + what + ") ran " + how +
                                   ", outside the graph's program, so the graph runs as several programs");
}

namespace {
// TORCH_TPU_DIST_CUT_COLLECTIVES=1: every collective ends the graph (for comparison, or as a way
// out should recording one ever misbehave).
std::atomic<bool>& cut_collectives() {
  static std::atomic<bool> cut{env_flag("TORCH_TPU_DIST_CUT_COLLECTIVES")};
  return cut;
}
}  // namespace

void FusedGraphs::set_cut_collectives(bool cut) { cut_collectives().store(cut); }

bool FusedGraphs::records_collectives(int device) {
  return (t_spmd_depth > 0 || t_capture_device == device) && !cut_collectives().load(std::memory_order_relaxed);
}

void FusedGraphs::spmd_safe_region(int delta) { t_spmd_depth = t_spmd_depth + delta < 0 ? 0 : t_spmd_depth + delta; }

bool FusedGraphs::in_spmd_safe_region() { return t_spmd_depth > 0; }

FusedStats FusedGraphs::stats() const {
  FusedStats total;
  each([&](FusedGraph& g) { total += g.stats(); });
  return total;
}

size_t FusedGraphs::pending_ops() const {
  size_t n = 0;
  each([&](FusedGraph& g) { n += g.pending_ops(); });
  return n;
}

}  // namespace tpu::exec
