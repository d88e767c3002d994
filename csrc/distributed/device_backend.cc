#include "distributed/device_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <functional>

#include "aten/op_runner.h"
#include "exec/execution_mode.h"
#include "exec/executor.h"
#include "exec/fused_graphs.h"
#include "runtime/group_launcher.h"
#include "runtime/launch_queue.h"
#include "runtime/pending_work.h"

namespace tpu::distributed {

namespace {

// Per device: each rank's own (ranks run as threads, and a rank's backward runs on its device's
// autograd thread).
std::mutex g_counts_mu;
std::map<int, DeviceBackend::Counts> g_counts;

void count(int device, bool recorded) {
  std::lock_guard<std::mutex> lock(g_counts_mu);
  DeviceBackend::Counts& c = g_counts[device];
  ++(recorded ? c.recorded : c.launched);
}

constexpr const char* kCollectivesDiffer =
    "the ranks called different collectives (a size, dtype or operation mismatch)";
constexpr const char* kCollectivesFix =
    "every rank must call the same collectives in the same order with tensors of the same dtype and size";
constexpr const char* kProgramsDiffer =
    "the ranks are about to run different programs with collectives (their op streams differ inside "
    "torch.tpu.distributed.spmd_safe or a compiled graph)";
constexpr const char* kProgramsFix =
    "inside spmd_safe every rank must issue the same device ops and collectives in the same order with the same "
    "shapes; move rank-dependent work outside the region (or out of the compiled function)";

// Rank r's payload differs from rank 0's: a clear error naming both.
void check_same(const std::vector<std::string>& payloads, const std::string& prefix, const char* problem,
                const char* fix) {
  for (size_t r = 1; r < payloads.size(); ++r) {
    if (payloads[r] != payloads[0]) {
      TORCH_CHECK(false, prefix, ": ", problem, ": rank 0 has ", payloads[0], ", rank ", r, " has ", payloads[r],
                  ". Fix: ", fix);
    }
  }
}

}  // namespace

DeviceBackend::Counts DeviceBackend::counts(int device) {
  std::lock_guard<std::mutex> lock(g_counts_mu);
  auto it = g_counts.find(device);
  return it == g_counts.end() ? Counts{} : it->second;
}

DeviceBackend::DeviceBackend(int rank, int size, std::chrono::milliseconds timeout, int device,
                             std::vector<int64_t> devices, std::string token, RendezvousFactory rendezvous)
    : TpuBackend(rank, size, timeout), device_(device), token_(std::move(token)),
      make_rendezvous_(std::move(rendezvous)) {
  TORCH_CHECK(static_cast<int>(devices.size()) == size, "tpu_dist: ", devices.size(),
              " device ids for a group of ", size);
  group_ = std::make_shared<Group>(*this, make_rendezvous_(token_, size), rank, std::move(devices));
  group_->launch_salt_ = std::hash<std::string>{}(token_) % 0x7ffffffe;
}

// Launches still queued on the device's group launcher hold their Group, never the backend; once
// abandoned, their meets fail at once. (Not drained here: the launcher is the device's, and its
// queue may hold launches of other groups, whose ranks may need this thread to get further.)
DeviceBackend::~DeviceBackend() { shutdown(); }

void DeviceBackend::abandon(const std::string& why) {
  group_->close();
  group_->rendezvous().abandon(getRank(), why);
  for (auto& [key, g] : pairs_) {
    g->close();
    g->rendezvous().abandon(g->rank(), why);
  }
}

void DeviceBackend::shutdown() { abandon("left the group (destroy_process_group or shutdown)"); }

void DeviceBackend::abort() { abandon("aborted its communicator"); }

void DeviceBackend::check_device(c10::Device d, const char* what) const {
  TORCH_CHECK(d.index() == device_, where(what), ": the tensors are on ", d, " but this rank's group "
              "was created for tpu:", device_, ". Fix: call torch.tpu.set_device(<the rank's device>) "
              "before init_process_group/new_group and keep each rank's tensors on it");
}

std::vector<std::string> DeviceBackend::meet(const Group& group, uint64_t round, std::string payload,
                                             const char* what) {
  runtime::GroupLauncher::of(device_).drain();  // the queued programs' meets come first
  return group.rendezvous().meet(round, group.rank(), std::move(payload), timeout_, where(what));
}

namespace {

// XLA:CPU starts a device's executions when their inputs are ready, not in launch order: a
// collective launched after another can run first and hold the device while the other waits for
// it forever. So a device runs one collective at a time: the next one is launched once the
// previous one (of any group) has finished there - which it does, since all its parts are
// launched before any rank goes on.
std::mutex g_last_mu;
std::map<int, std::shared_ptr<pjrt::Event>> g_last_collective;

void await_previous_collective(int device) {
  std::shared_ptr<pjrt::Event> last;
  {
    std::lock_guard<std::mutex> lock(g_last_mu);
    last = g_last_collective[device];
  }
  if (last != nullptr && !last->is_ready()) {
    try {
      last->await();
    } catch (const std::exception&) {
      // Its own outputs carry the error; this collective is not affected.
    }
  }
}

// `done`: the execution's completion - not an output's readiness, which a program that also
// forwards an input can give before it has run.
void note_collective(int device, std::shared_ptr<pjrt::Event> done) {
  if (done == nullptr) return;
  std::lock_guard<std::mutex> lock(g_last_mu);
  g_last_collective[device] = std::move(done);
}

}  // namespace

void DeviceBackend::Group::launch_program(runtime::Launch part, const std::string& program) const {
  if (closed()) {
    const std::string why = "torch_tpu: a program with collectives was compiled for a process group that has been "
                            "destroyed; create the group again and run the code again to recompile for it";
    for (size_t i = part.num_args; i < part.buffers.size(); ++i) part.buffers[i]->fail(why);
    throw std::runtime_error(why);
  }
  // The launcher thread never waits for the launch queue (whose launches may read this program's
  // outputs): an argument an eager launch still promises is handed to PJRT first.
  for (size_t i = 0; i < part.num_args; ++i) {
    if (part.buffers[i]->unresolved()) {
      runtime::LaunchQueue::get().drain();
      break;
    }
  }
  // Its own pair of meets, numbered like a collective's (every rank launches the same programs
  // and collectives in the same order).
  uint64_t round = 0;
  {
    std::lock_guard<std::recursive_mutex> lock(owner_.mu_);
    round = kMeetsPerCollective * owner_.seq_++;
  }
  Part p = meet_plan(round, program, "a program with collectives", true);
  // Launched by the device's group launcher: this rank records on while the ranks meet. Its
  // outputs count as held while defined, as a queued launch's do (the next program may donate
  // one: PJRT orders the two).
  part.queued = true;
  for (size_t i = part.num_args; i < part.buffers.size(); ++i) part.buffers[i]->hold_while_defined();
  auto self = std::static_pointer_cast<const Group>(shared_from_this());
  runtime::GroupLauncher::of(part.device).push([self, part = std::move(part), p = std::move(p)]() mutable {
    // A failure fails the outputs: their readers (and the programs that read them) get the error.
    self->launch_part(part, p);
  });
}

void DeviceBackend::Group::launch(runtime::Launch launch) const {
  // After the programs this rank has handed to the group launcher: their meets come first.
  runtime::GroupLauncher::of(launch.device).drain();
  launch_part(launch, meet_plan(round, signature, what, /*program=*/false));
}

DeviceBackend::Group::Part DeviceBackend::Group::meet_plan(uint64_t round, std::string signature,
                                                           const char* what, bool program) const {
  Part p;
  p.round = round;
  p.signature = std::move(signature);
  p.what = what;
  p.where = owner_.where(what);
  p.timeout = owner_.timeout_;
  p.program = program;
  return p;
}

void DeviceBackend::Group::launch_part(runtime::Launch& launch, const Part& p) const {
  await_previous_collective(launch.device);
  auto fail = [&](const std::string& why) {
    for (size_t i = launch.num_args; i < launch.buffers.size(); ++i) {
      if (launch.buffers[i]->unresolved()) launch.buffers[i]->fail(why);
    }
    if (launch.queued) {
      launch.queued = false;
      for (size_t i = launch.num_args; i < launch.buffers.size(); ++i) launch.buffers[i]->release_defined_hold();
    }
  };
  // Everyone has built (and compiled) its part and agrees on what runs: launch together.
  try {
    check_same(rendezvous_->meet(p.round, rank_, p.signature, p.timeout, p.where), p.where,
               p.program ? kProgramsDiffer : kCollectivesDiffer, p.program ? kProgramsFix : kCollectivesFix);
  } catch (const std::exception& e) {
    // Nothing was launched: the outputs (promised already) carry the error to their readers.
    fail(e.what());
    throw;
  }
  const int device = launch.device;
  // One id per launch of the group, the same on every rank: the plugin matches the parts of this
  // launch's collectives by it, never with another launch's whose ops have the same ids.
  launch.launch_id = static_cast<int>((launch_salt_ + p.round / kMeetsPerCollective) % 0x7ffffffe) + 1;
  note_collective(device, runtime::launch_now(launch));
  rendezvous_->meet(p.round + 1, rank_, "", p.timeout, p.where);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::collective(const Group& group, const char* what,
                                                         c10d::OpType type, std::string signature,
                                                         std::vector<at::Tensor> outputs,
                                                         const std::function<void()>& body,
                                                         bool same_on_every_rank) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const bool record = same_on_every_rank && &group == group_.get() &&
                      exec::eager_mode() == exec::EagerMode::kFused &&
                      exec::FusedGraphs::records_collectives(device_);
  std::optional<exec::StrictScope> strict;
  if (record) {
    count(device_, true);  // joins the device's deferred graph
  } else {
    strict.emplace();  // nothing of the collective is recorded into the deferred graph
    // Under torch.compile the graph then keeps the eager behaviour: refused for replay, saying why.
    exec::Executor::get().fused().cut_capture_by_collective(what, "as a program of its own");
    runtime::flush_pending_work_on(device_);  // a collective ends this device's pending graph
    count(device_, false);
  }
  group.what = what;
  group.signature = std::move(signature);
  try {
    body();
  } catch (const std::exception& e) {
    // A rank that fails before launching must not leave the others waiting.
    group.rendezvous().abandon(group.rank(), std::string("failed in ") + what + ": " + e.what());
    throw;
  }
  auto work = c10::make_intrusive<TpuWork>(getRank(), type, what,
                                           c10::Device(c10::DeviceType::PrivateUse1, device_),
                                           std::move(outputs), record);
  work->succeed();
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

DeviceBackend::Group& DeviceBackend::pair(int src, int dst) {
  auto& slot = pairs_[{src, dst}];
  if (slot == nullptr) {
    const std::string token = token_ + "/p2p/" + std::to_string(src) + ">" + std::to_string(dst);
    slot = std::make_shared<Group>(*this, make_rendezvous_(token, 2), getRank() == src ? 0 : 1,
                                   std::vector<int64_t>{group_->devices()[src], group_->devices()[dst]});
    slot->launch_salt_ = std::hash<std::string>{}(token) % 0x7ffffffe;
  }
  return *slot;
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::transfer(const at::Tensor& tensor, int src, int dst) {
  const char* what = getRank() == src ? "send" : "recv";
  Group& g = pair(src, dst);
  std::vector<at::Tensor> outs;
  if (getRank() == dst) outs.push_back(tensor);
  // Both sides run the same program: the sender's tensor arrives in the receiver's output.
  return collective(g, what, getRank() == src ? c10d::OpType::SEND : c10d::OpType::RECV,
                    "send/recv " + std::to_string(src) + "->" + std::to_string(dst) + " " + describe(tensor),
                    outs, [&] {
    at::Tensor in = dense(tensor);
    g.round = kMeetsPerCollective * pair_rounds_[{src, dst}]++;
    aten::OpRunner r("collective_permute", "c10d::send/recv");
    r.over(&g).input(in);
    r.attrs().set_ints("pairs", {0, 1}).set_int("group_size", 2);
    auto out = r.run(1);
    if (getRank() == dst) tensor.copy_(out[0]);
  });
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  TORCH_CHECK(tensors.size() == 1, where("send"), ": one tensor at a time");
  check_device(check_tensors(tensors, "send"), "send");
  TORCH_CHECK(dst >= 0 && dst < getSize() && dst != getRank(), where("send"), ": cannot send to rank ", dst);
  if (coalescing_) {
    auto work = c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::SEND, "send",
                                             c10::Device(c10::DeviceType::PrivateUse1, device_),
                                             std::vector<at::Tensor>{});
    pending_p2p_.push_back({true, dst, tensors[0], work});
    return work;
  }
  return transfer(tensors[0], getRank(), dst);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  TORCH_CHECK(tensors.size() == 1, where("recv"), ": one tensor at a time");
  check_device(check_tensors(tensors, "recv"), "recv");
  TORCH_CHECK(src >= 0 && src < getSize() && src != getRank(), where("recv"), ": cannot receive from rank ", src);
  if (coalescing_) {
    auto work = c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::RECV, "recv",
                                             c10::Device(c10::DeviceType::PrivateUse1, device_), tensors);
    pending_p2p_.push_back({false, src, tensors[0], work});
    return work;
  }
  return transfer(tensors[0], src, getRank());
}

void DeviceBackend::startCoalescing() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  TORCH_CHECK(!coalescing_, where("startCoalescing"), ": already coalescing");
  coalescing_ = true;
  coalesced_.clear();
  pending_p2p_.clear();
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::endCoalescing() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  TORCH_CHECK(coalescing_, where("endCoalescing"), ": not coalescing");
  // Point-to-point operations of a batch run in one order on every rank: by (sender, receiver),
  // in the order given within a pair - so isend/irecv pairs issued in any order meet.
  std::vector<PendingP2P> p2p = std::move(pending_p2p_);
  std::stable_sort(p2p.begin(), p2p.end(), [&](const PendingP2P& a, const PendingP2P& b) {
    const auto ka = a.send ? std::make_pair(getRank(), a.peer) : std::make_pair(a.peer, getRank());
    const auto kb = b.send ? std::make_pair(getRank(), b.peer) : std::make_pair(b.peer, getRank());
    return ka < kb;
  });
  coalescing_ = false;
  std::vector<at::Tensor> outs;
  for (const auto& op : p2p) {
    transfer(op.tensor, op.send ? getRank() : op.peer, op.send ? op.peer : getRank());
    op.work->succeed();
    if (!op.send) outs.push_back(op.tensor);
  }
  for (const auto& w : coalesced_) {
    for (const auto& t : w->result()) outs.push_back(t);
  }
  coalesced_.clear();
  auto work = c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::COALESCED, "coalesced",
                                           c10::Device(c10::DeviceType::PrivateUse1, device_), outs);
  work->succeed();
  return work;
}

}  // namespace tpu::distributed
