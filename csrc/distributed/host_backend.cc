#include "distributed/host_backend.h"

#include <ATen/ATen.h>

#include <chrono>
#include <sstream>

#include "aten/tensor_access.h"
#include "common/thread_name.h"
#include "distributed/host_staging.h"
#include "distributed/peer_status.h"
#include "exec/execution_mode.h"
#include "exec/executor.h"
#include "exec/fused_graphs.h"
#include "runtime/pending_work.h"

namespace tpu::distributed {

namespace {

// Collective kinds as they appear in signatures (index) and messages (name).
const char* const kKinds[] = {"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                              "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all",
                              "gather", "scatter", "barrier"};
constexpr size_t kFixed = 6;  // kind, dtype, numel, shape hash, root, reduce op

int64_t kind_index(const char* what) {
  for (size_t i = 0; i < sizeof(kKinds) / sizeof(kKinds[0]); ++i) {
    if (std::string(kKinds[i]) == what) return static_cast<int64_t>(i);
  }
  return -1;
}

std::string describe_signature(const std::vector<int64_t>& s) {
  std::ostringstream o;
  const int64_t kind = s[0];
  o << (kind >= 0 && kind < static_cast<int64_t>(sizeof(kKinds) / sizeof(kKinds[0])) ? kKinds[kind] : "?");
  if (s[1] >= 0) o << " of " << c10::getDtypeNames(static_cast<at::ScalarType>(s[1])).first;
  o << " with " << s[2] << " elements";
  if (s[4] >= 0) o << ", root " << s[4];
  return o.str();
}

struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "" when the ranks' signatures agree; else what differs, naming the ranks.
std::string signature_mismatch(const std::vector<std::vector<int64_t>>& all, int me) {
  const size_t n = all.size();
  const std::vector<int64_t>& mine = all[me];
  for (size_t r = 0; r < n; ++r) {
    const std::vector<int64_t>& theirs = all[r];
    // all_to_all: sizes differ between ranks; rank r must send rank me what it expects.
    const bool exchange = mine[0] == kind_index("all_to_all") || mine[0] == kind_index("all_to_all_single");
    bool same = theirs.size() == mine.size() && theirs[0] == mine[0] && theirs[1] == mine[1];
    if (same && !exchange) same = theirs == mine;
    if (same && exchange) same = theirs[4] == mine[4] && theirs[5] == mine[5];
    if (!same) {
      std::ostringstream msg;
      msg << "the ranks called different collectives (a size, dtype or operation mismatch): rank " << me
          << " has " << describe_signature(mine) << ", rank " << r << " has " << describe_signature(theirs)
          << ". Fix: every rank must call the same collectives in the same order with tensors of the "
             "same dtype and size";
      return msg.str();
    }
    if (exchange) {
      const int64_t sends = theirs[kFixed + me], expects = mine[kFixed + n + r];
      if (sends != expects) {
        std::ostringstream msg;
        msg << "rank " << r << " sends " << sends << " elements to rank " << me << ", which expects "
            << expects << " from it. Fix: make every rank's output split sizes match what the other "
            "ranks send it";
        return msg.str();
      }
    }
  }
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Returns once the device has computed `t` (a snapshot: its storage holds one buffer).
void wait_until_computed(const at::Tensor& t) {
  const auto contents = aten::storage(t).contents();
  if (contents.buffer != nullptr) contents.buffer->ready_event()->await("tpu_dist: waiting for an input");
}

}  // namespace

struct HostBackend::State {
  c10::intrusive_ptr<c10d::Backend> gloo;
  PeerStatus peers;
  int rank = 0;
  int size = 1;
  bool check = true;
  std::string prefix;  // "on rank 0 of 2 (host transport)"

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Job>> to_issue, to_complete;
  bool stop = false;
  Timings timings;

  void issue_loop();
  void complete_loop();
  void complete(Job& job);
  std::string failure(const Job& job, const std::string& what_happened);
};

HostBackend::HostBackend(int rank, int size, std::chrono::milliseconds timeout,
                         c10::intrusive_ptr<c10d::Backend> gloo, c10::intrusive_ptr<c10d::Store> store,
                         std::vector<int64_t> global_ranks, bool check)
    : TpuBackend(rank, size, timeout), state_(std::make_shared<State>()) {
  state_->gloo = std::move(gloo);
  state_->peers = PeerStatus(std::move(store), std::move(global_ranks), rank);
  state_->rank = rank;
  state_->size = size;
  state_->check = check;
  state_->prefix = "on rank " + std::to_string(rank) + " of " + std::to_string(size) + " (host transport)";
  auto s = state_;
  std::thread([s] {
    name_this_thread("tpu_dist_issue");
    s->issue_loop();
  }).detach();
  std::thread([s] {
    name_this_thread("tpu_dist_done");
    s->complete_loop();
  }).detach();
}

HostBackend::~HostBackend() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  // The threads own the state too: a job stuck in Gloo (a dead peer) cannot hold up exit.
}

void HostBackend::setTimeout(std::chrono::milliseconds timeout) {
  TpuBackend::setTimeout(timeout);
  state_->gloo->setTimeout(timeout);
}

HostBackend::Timings HostBackend::timings() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->timings;
}

std::vector<int64_t> HostBackend::signature(const char* what, const std::vector<at::Tensor>& ts,
                                            std::vector<int64_t> extra) const {
  std::vector<int64_t> s(kFixed + 2 * static_cast<size_t>(getSize()), -1);
  s[0] = kind_index(what);
  int64_t numel = 0;
  uint64_t hash = 1469598103934665603ull;
  for (const auto& t : ts) {
    s[1] = static_cast<int64_t>(t.scalar_type());
    numel += t.numel();
    for (int64_t d : t.sizes()) hash = (hash ^ static_cast<uint64_t>(d)) * 1099511628211ull;
    hash = (hash ^ 0xff) * 1099511628211ull;
  }
  s[2] = numel;
  s[3] = static_cast<int64_t>(hash >> 1);
  for (size_t i = 0; i < extra.size() && kFixed - 2 + i < s.size(); ++i) s[4 + i] = extra[i];
  return s;
}

c10::intrusive_ptr<c10d::Work> HostBackend::submit(const char* what, c10d::OpType type,
                                                   std::vector<at::Tensor> outputs, std::unique_ptr<Job> job) {
  // Under torch.compile the graph keeps the eager behaviour: refused for replay, saying why.
  exec::Executor::get().fused().cut_capture_by_collective(what, "over the host transport");
  job->what = what;
  job->work = c10::make_intrusive<TpuWork>(getRank(), type, what,
                                           outputs.empty() ? c10::Device(c10::DeviceType::PrivateUse1, 0)
                                                           : outputs.front().device(),
                                           std::move(outputs));
  if (!state_->check) job->signature.clear();
  auto work = job->work;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->to_issue.push_back(std::move(job));
  }
  state_->cv.notify_all();
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

void HostBackend::State::issue_loop() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !to_issue.empty(); });
      if (to_issue.empty()) return;
      job = std::move(to_issue.front());
      to_issue.pop_front();
    }
    try {
      exec::StrictScope strict;
      // The signature exchange goes first (it needs no data, so its round trip overlaps the wait
      // for the device), and the data only once every rank agrees: Gloo aborts the process when
      // a peer's message has an unexpected size.
      c10::intrusive_ptr<c10d::Work> check;
      std::vector<std::vector<at::Tensor>> check_out(1);
      if (!job->signature.empty()) {
        at::Tensor mine = at::tensor(job->signature, at::kLong);
        for (int r = 0; r < size; ++r) check_out[0].push_back(at::empty_like(mine));
        std::vector<at::Tensor> in{mine};
        check = gloo->allgather(check_out, in);
      }
      // The wait for the device happens here, not in the caller.
      const auto wait_start = std::chrono::steady_clock::now();
      for (const auto& t : job->device_inputs) wait_until_computed(t);
      const double waited = seconds_since(wait_start);
      const auto start = std::chrono::steady_clock::now();
      for (const auto& t : job->device_inputs) job->host.push_back(HostStaging::get().copy_of(t));
      const double to_host = seconds_since(start);
      const auto gloo_start = std::chrono::steady_clock::now();
      if (check) {
        check->wait();
        std::vector<std::vector<int64_t>> all;
        for (const at::Tensor& t : check_out[0]) all.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
        const std::string mismatch = signature_mismatch(all, rank);
        if (!mismatch.empty()) throw Mismatch(std::string("tpu_dist ") + job->what + " " + prefix + ": " + mismatch);
      }
      job->gloo_works = job->issue(*gloo, *job);
      std::lock_guard<std::mutex> lock(mu);
      timings.waiting_for_device += waited;
      timings.to_host += to_host;
      timings.gloo += seconds_since(gloo_start);
    } catch (const Mismatch& e) {
      job->mismatch = e.what();
    } catch (const std::exception& e) {
      job->error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      to_complete.push_back(std::move(job));
    }
    cv.notify_all();
  }
}

void HostBackend::State::complete_loop() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return (stop && to_issue.empty()) || !to_complete.empty(); });
      if (to_complete.empty()) return;
      job = std::move(to_complete.front());
      to_complete.pop_front();
    }
    complete(*job);
  }
}

void HostBackend::State::complete(Job& job) {
  if (!job.mismatch.empty()) {
    job.work->fail(job.mismatch);  // no rank sent any data: the group stays usable
    return;
  }
  if (!job.error.empty()) {
    job.work->fail(failure(job, job.error));
    return;
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    for (auto& w : job.gloo_works) w->wait();
    const double gloo_seconds = seconds_since(start);
    const auto back = std::chrono::steady_clock::now();
    {
      exec::StrictScope strict;
      if (job.finish) job.finish(job);
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      timings.gloo += gloo_seconds;
      timings.to_device += seconds_since(back);
      ++timings.jobs;
    }
    job.work->succeed();
  } catch (const std::exception& e) {
    job.work->fail(failure(job, e.what()));
  }
}

std::string HostBackend::State::failure(const Job& job, const std::string& what_happened) {
  std::string msg = std::string("tpu_dist ") + job.what + " " + prefix + " failed";
  const std::string peers_note = peers.diagnose();
  if (!peers_note.empty()) msg += ": " + peers_note;
  return msg + ". Gloo reported: " + what_happened;
}

// ---- collectives ------------------------------------------------------------------------------

void HostBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, where("startCoalescing"), ": already coalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> HostBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, where("endCoalescing"), ": not coalescing");
  coalescing_ = false;
  // Gloo already has every operation of the batch (point-to-point posts do not block): the
  // batch's work completes when the last of them has.
  auto works = std::move(coalesced_);
  auto job = std::make_unique<Job>();
  job->issue = [](c10d::Backend&, Job&) { return Works{}; };
  job->finish = [works](Job&) {
    for (const auto& w : works) w->wait();
  };
  std::vector<at::Tensor> outs;
  for (const auto& w : works) {
    for (const auto& t : w->result()) outs.push_back(t);
  }
  return submit("coalesced", c10d::OpType::COALESCED, outs, std::move(job));
}

}  // namespace tpu::distributed
