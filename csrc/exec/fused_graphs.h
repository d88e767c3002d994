// Fused Eager keeps one deferred graph per device (exec/fused_graph.h), the way CUDA keeps a
// stream per device: ranks that run as threads of one process, one device each, record their
// own graphs side by side instead of cutting one shared graph at every change of device. This
// is the runtime's PendingWork: it hands each request to the graph of the storage's device.
//
// It also holds the calling thread's part in recording collectives (exec/replica_group.h): a
// collective is recorded into its device's graph only where the ranks have promised the same op
// stream - inside torch.tpu.distributed.spmd_safe, or while the thread captures a compiled graph
// on that device.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "exec/fused_graph.h"
#include "runtime/pending_work.h"

namespace tpu::exec {

class FusedGraphs : public runtime::PendingWork {
 public:
  FusedGraphs();
  ~FusedGraphs() override;

  // The graph of `device` (made on first use).
  FusedGraph& of(int device);
  // Records `call` into its device's graph (FusedGraph::record; inside spmd_safe the graph
  // becomes the calling thread's).
  std::vector<FreshOutput> record(OpCall call);
  // Whether `call` runs in Strict mode instead (FusedGraph::diverts).
  bool diverts(const OpCall& call);
  // Every graph's advisor starts afresh (FusedGraph::reset_advisor).
  void reset_advisors();

  // Every device's graph - except one holding collectives another thread recorded: only its
  // rank's own thread may launch it (launched from here it would wait for a part this thread
  // is meant to launch afterwards).
  void flush() override;
  // The same for `device`'s graph alone.
  void flush_device(int device) override;
  bool pending_on(int device) const override;
  void flush_for(const runtime::DeviceStorage* storage) override;
  void forget(runtime::DeviceStorage* storage, bool destroyed) override;
  // A host read cuts the calling thread's capture, if any.
  void host_read() override;

  // torch.compile capture on the calling thread, into `device`'s graph (see FusedGraph).
  void begin_capture(int device, bool bake);
  // The device the calling thread captures on, or -1.
  static int capture_device();
  void end_capture();
  // An op of the calling thread on `device` while it captures on another: the capture is not
  // the whole computation.
  void note_other_device(int device);
  // A collective `what` of the calling thread ran `how` ("as a program of its own", "over the
  // host transport"), outside the graph: its capture, if any, is not the whole computation, and
  // the refused replay says so.
  void cut_capture_by_collective(const char* what, const char* how);

  // Whether a collective of the calling thread on `device` is recorded into the graph.
  static bool records_collectives(int device);
  // Turns recording collectives off (every collective ends the graph) or back on; the default
  // comes from TORCH_TPU_DIST_CUT_COLLECTIVES.
  static void set_cut_collectives(bool cut);
  // Enters (+1) or leaves (-1) an spmd_safe region on the calling thread.
  static void spmd_safe_region(int delta);
  static bool in_spmd_safe_region();

  FusedStats stats() const;
  size_t pending_ops() const;

 private:
  static constexpr int kMaxDevices = 1024;
  template <typename F>
  void each(F&& f) const;

  std::mutex mu_;  // making a graph
  std::array<std::atomic<FusedGraph*>, kMaxDevices> graphs_{};
};

}  // namespace tpu::exec
