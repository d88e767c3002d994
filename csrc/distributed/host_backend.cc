#include "distributed/host_backend.h"

#include <ATen/ATen.h>

#include <chrono>
#include <sstream>

#include "aten/tensor_access.h"
#include "distributed/host_staging.h"
#include "distributed/peer_status.h"
#include "exec/execution_mode.h"
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

at::Tensor host_like(const at::Tensor& t) { return HostStaging::get().empty(t.sizes(), t.scalar_type()); }

std::vector<at::Tensor> hosts_like(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(host_like(t));
  return out;
}

// A snapshot of a tpu tensor's values: free for a whole tensor (buffers are immutable).
at::Tensor snapshot(const at::Tensor& t) {
  at::Tensor s = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  s.copy_(t);
  return s;
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
  std::thread([s] { s->issue_loop(); }).detach();
  std::thread([s] { s->complete_loop(); }).detach();
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

namespace {

// Applies PREMUL_SUM's factor to host tensors and turns the c10d op into one Gloo runs.
c10d::ReduceOp gloo_op(const c10d::ReduceOp& op, const Reduction& red, std::vector<at::Tensor>& host) {
  if (red.premul) {
    const at::Tensor factor = red.premul->cpu();
    for (auto& h : host) h.mul_(factor.to(h.scalar_type()));
  }
  if (red.premul || red.mean) return c10d::ReduceOp(c10d::ReduceOp::SUM);
  return op;
}

void divide_if_mean(const Reduction& red, std::vector<at::Tensor>& host, int size) {
  if (!red.mean) return;
  for (auto& h : host) h.div_(size);
}

void copy_back(const std::vector<at::Tensor>& device, const std::vector<at::Tensor>& host) {
  for (size_t i = 0; i < device.size(); ++i) HostStaging::get().write(device[i], host[i]);
}

std::vector<at::Tensor> snapshots(const std::vector<at::Tensor>& ts) {
  exec::StrictScope strict;
  runtime::flush_pending_work();  // a collective ends the pending graph
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(snapshot(t));
  return out;
}

}  // namespace

using Works = std::vector<c10::intrusive_ptr<c10d::Work>>;

c10::intrusive_ptr<c10d::Work> HostBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  const char* what = "all_reduce";
  check_tensors(tensors, what);
  const Reduction red = reduction(opts.reduceOp, tensors[0].scalar_type(), what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(tensors);
  job->signature = signature(what, tensors, {-1, static_cast<int64_t>(opts.reduceOp.op_)});
  job->issue = [red, opts](c10d::Backend& gloo, Job& j) {
    c10d::AllreduceOptions o = opts;
    o.reduceOp = gloo_op(opts.reduceOp, red, j.host);
    return Works{gloo.allreduce(j.host, o)};
  };
  const int n = getSize();
  job->finish = [red, n, tensors](Job& j) {
    divide_if_mean(red, j.host, n);
    copy_back(tensors, j.host);
  };
  return submit(what, c10d::OpType::ALLREDUCE, tensors, std::move(job));
}


c10::intrusive_ptr<c10d::Work> HostBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  const char* what = "broadcast";
  check_tensors(tensors, what);
  const int root = check_root(opts.rootRank, what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(tensors);
  job->signature = signature(what, tensors, {root});
  job->issue = [opts](c10d::Backend& gloo, Job& j) { return Works{gloo.broadcast(j.host, opts)}; };
  const bool is_root = getRank() == root;
  job->finish = [is_root, tensors](Job& j) {
    if (!is_root) copy_back(tensors, j.host);
  };
  return submit(what, c10d::OpType::BROADCAST, tensors, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& opts) {
  const char* what = "reduce";
  check_tensors(tensors, what);
  const int root = check_root(opts.rootRank, what);
  const Reduction red = reduction(opts.reduceOp, tensors[0].scalar_type(), what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(tensors);
  job->signature = signature(what, tensors, {root, static_cast<int64_t>(opts.reduceOp.op_)});
  job->issue = [red, opts](c10d::Backend& gloo, Job& j) {
    c10d::ReduceOptions o = opts;
    o.reduceOp = gloo_op(opts.reduceOp, red, j.host);
    return Works{gloo.reduce(j.host, o)};
  };
  const bool is_root = getRank() == root;
  const int n = getSize();
  // Only the root's tensors receive the result; the others keep their input.
  job->finish = [red, n, is_root, tensors](Job& j) {
    if (!is_root) return;
    divide_if_mean(red, j.host, n);
    copy_back(tensors, j.host);
  };
  return submit(what, c10d::OpType::REDUCE, tensors, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  const char* what = "all_gather";
  check_tensors(inputs, what);
  check_tensors(outputs, what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(inputs);
  job->signature = signature(what, inputs, {});
  auto host_out = std::make_shared<std::vector<std::vector<at::Tensor>>>();
  for (const auto& l : outputs) host_out->push_back(hosts_like(l));
  job->issue = [opts, host_out](c10d::Backend& gloo, Job& j) { return Works{gloo.allgather(*host_out, j.host, opts)}; };
  job->finish = [outputs, host_out](Job&) {
    for (size_t i = 0; i < outputs.size(); ++i) copy_back(outputs[i], (*host_out)[i]);
  };
  std::vector<at::Tensor> flat;
  for (const auto& l : outputs) flat.insert(flat.end(), l.begin(), l.end());
  return submit(what, c10d::OpType::ALLGATHER, flat, std::move(job));
}


c10::intrusive_ptr<c10d::Work> HostBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::AllgatherOptions& opts) {
  const char* what = "all_gather_into_tensor";
  check_tensors(inputs, what);
  check_tensors(outputs, what);
  check_gathered(outputs, inputs, what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(inputs);
  job->signature = signature(what, inputs, {});
  auto host_out = std::make_shared<std::vector<at::Tensor>>(hosts_like(outputs));
  job->issue = [opts, host_out](c10d::Backend& gloo, Job& j) {
    Works works;
    for (size_t i = 0; i < j.host.size(); ++i) works.push_back(gloo._allgather_base((*host_out)[i], j.host[i], opts));
    return works;
  };
  job->finish = [outputs, host_out](Job&) { copy_back(outputs, *host_out); };
  return submit(what, c10d::OpType::_ALLGATHER_BASE, outputs, std::move(job));
}


c10::intrusive_ptr<c10d::Work> HostBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter";
  check_tensors(outputs, what);
  check_tensors(inputs, what);
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              where(what), ": one output and one input per rank are needed");
  const Reduction red = reduction(opts.reduceOp, outputs[0].scalar_type(), what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(inputs[0]);
  job->signature = signature(what, inputs[0], {-1, static_cast<int64_t>(opts.reduceOp.op_)});
  auto host_out = std::make_shared<std::vector<at::Tensor>>(hosts_like(outputs));
  job->issue = [red, opts, host_out](c10d::Backend& gloo, Job& j) {
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = gloo_op(opts.reduceOp, red, j.host);
    std::vector<std::vector<at::Tensor>> in{j.host};
    return Works{gloo.reduce_scatter(*host_out, in, o)};
  };
  const int n = getSize();
  job->finish = [red, n, outputs, host_out](Job&) {
    divide_if_mean(red, *host_out, n);
    copy_back(outputs, *host_out);
  };
  return submit(what, c10d::OpType::REDUCE_SCATTER, outputs, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor";
  check_tensors(inputs, what);
  check_tensors(outputs, what);
  check_scattered(outputs, inputs, what);
  const Reduction red = reduction(opts.reduceOp, inputs[0].scalar_type(), what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(inputs);
  job->signature = signature(what, inputs, {-1, static_cast<int64_t>(opts.reduceOp.op_)});
  auto host_out = std::make_shared<std::vector<at::Tensor>>(hosts_like(outputs));
  job->issue = [red, opts, host_out](c10d::Backend& gloo, Job& j) {
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = gloo_op(opts.reduceOp, red, j.host);
    Works works;
    for (size_t i = 0; i < j.host.size(); ++i) {
      at::Tensor in = j.host[i].reshape({-1});
      at::Tensor out = (*host_out)[i].view({-1});
      works.push_back(gloo._reduce_scatter_base(out, in, o));
    }
    return works;
  };
  const int n = getSize();
  job->finish = [red, n, outputs, host_out](Job&) {
    divide_if_mean(red, *host_out, n);
    copy_back(outputs, *host_out);
  };
  return submit(what, c10d::OpType::_REDUCE_SCATTER_BASE, outputs, std::move(job));
}


c10::intrusive_ptr<c10d::Work> HostBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions& opts) {
  const char* what = "all_to_all_single";
  check_tensors({input, output}, what);
  const int n = getSize();
  TORCH_CHECK(input_splits.empty() || static_cast<int>(input_splits.size()) == n, where(what), ": ",
              input_splits.size(), " input split sizes for a group of ", n);
  TORCH_CHECK(output_splits.empty() || static_cast<int>(output_splits.size()) == n, where(what), ": ",
              output_splits.size(), " output split sizes for a group of ", n);
  // Elements each rank sends to / expects from every other: checked against the peers'.
  const int64_t in_row = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t out_row = output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  std::vector<int64_t> extra{-1, -1};
  for (int j = 0; j < n; ++j) extra.push_back(input_splits.empty() ? input.numel() / n : input_splits[j] * in_row);
  for (int j = 0; j < n; ++j) extra.push_back(output_splits.empty() ? output.numel() / n : output_splits[j] * out_row);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots({input});
  job->signature = signature(what, {input}, extra);
  // Sizes legitimately differ between ranks; what must agree is checked after the exchange.
  job->signature[2] = job->signature[3] = -1;
  auto host_out = std::make_shared<at::Tensor>(host_like(output));
  job->issue = [opts, host_out, output_splits, input_splits](c10d::Backend& gloo, Job& j) {
    std::vector<int64_t> o = output_splits, i = input_splits;
    return Works{gloo.alltoall_base(*host_out, j.host[0], o, i, opts)};
  };
  job->finish = [output, host_out](Job&) { HostStaging::get().write(output, *host_out); };
  return submit(what, c10d::OpType::ALLTOALL_BASE, {output}, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions& opts) {
  const char* what = "all_to_all";
  check_tensors(inputs, what);
  check_tensors(outputs, what);
  TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
              where(what), ": one input and one output tensor per rank are needed");
  std::vector<int64_t> extra{-1, -1};
  for (const auto& t : inputs) extra.push_back(t.numel());
  for (const auto& t : outputs) extra.push_back(t.numel());
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(inputs);
  job->signature = signature(what, {inputs[0]}, extra);
  job->signature[2] = job->signature[3] = -1;
  // Gloo's list all_to_all takes equal sizes only: the pieces travel flat, with their counts.
  std::vector<int64_t> in_counts, out_counts;
  int64_t out_total = 0;
  for (const auto& t : inputs) in_counts.push_back(t.numel());
  for (const auto& t : outputs) {
    out_counts.push_back(t.numel());
    out_total += t.numel();
  }
  auto host_out = std::make_shared<at::Tensor>(HostStaging::get().empty({out_total}, outputs[0].scalar_type()));
  job->issue = [opts, host_out, in_counts, out_counts](c10d::Backend& gloo, Job& j) {
    std::vector<at::Tensor> flat;
    for (const auto& h : j.host) flat.push_back(h.reshape({-1}));
    at::Tensor in = at::cat(flat);
    std::vector<int64_t> o = out_counts, i = in_counts;
    return Works{gloo.alltoall_base(*host_out, in, o, i, opts)};
  };
  job->finish = [outputs, host_out, out_counts](Job&) {
    int64_t at = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      HostStaging::get().write(outputs[i], host_out->narrow(0, at, out_counts[i]).view(outputs[i].sizes()));
      at += out_counts[i];
    }
  };
  return submit(what, c10d::OpType::ALLTOALL, outputs, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions& opts) {
  const char* what = "gather";
  check_tensors(inputs, what);
  const bool is_root = getRank() == opts.rootRank;
  if (is_root) check_tensors(outputs, what);
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(inputs);
  job->signature = signature(what, inputs, {static_cast<int64_t>(opts.rootRank)});
  auto host_out = std::make_shared<std::vector<std::vector<at::Tensor>>>();
  for (const auto& l : outputs) host_out->push_back(hosts_like(l));
  job->issue = [opts, host_out](c10d::Backend& gloo, Job& j) { return Works{gloo.gather(*host_out, j.host, opts)}; };
  job->finish = [outputs, host_out](Job&) {
    for (size_t i = 0; i < outputs.size(); ++i) copy_back(outputs[i], (*host_out)[i]);
  };
  std::vector<at::Tensor> flat;
  for (const auto& l : outputs) flat.insert(flat.end(), l.begin(), l.end());
  return submit(what, c10d::OpType::GATHER, flat, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  const char* what = "scatter";
  check_tensors(outputs, what);
  const bool is_root = getRank() == opts.rootRank;
  std::vector<at::Tensor> root_inputs;
  if (is_root) {
    TORCH_CHECK(inputs.size() == 1, where(what), ": the root needs one input list");
    check_tensors(inputs, what);
    root_inputs = inputs[0];
  }
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(root_inputs);
  job->signature = signature(what, outputs, {static_cast<int64_t>(opts.rootRank)});
  auto host_out = std::make_shared<std::vector<at::Tensor>>(hosts_like(outputs));
  job->issue = [opts, host_out, is_root](c10d::Backend& gloo, Job& j) {
    std::vector<std::vector<at::Tensor>> in;
    if (is_root) in.push_back(j.host);
    return Works{gloo.scatter(*host_out, in, opts)};
  };
  job->finish = [outputs, host_out](Job&) { copy_back(outputs, *host_out); };
  return submit(what, c10d::OpType::SCATTER, outputs, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_tensors(tensors, "send");
  auto job = std::make_unique<Job>();
  job->device_inputs = snapshots(tensors);
  job->issue = [dst, tag](c10d::Backend& gloo, Job& j) { return Works{gloo.send(j.host, dst, tag)}; };
  return submit("send", c10d::OpType::SEND, {}, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_tensors(tensors, "recv");
  auto job = std::make_unique<Job>();
  auto host_out = std::make_shared<std::vector<at::Tensor>>(hosts_like(tensors));
  job->issue = [src, tag, host_out](c10d::Backend& gloo, Job&) { return Works{gloo.recv(*host_out, src, tag)}; };
  job->finish = [tensors, host_out](Job&) { copy_back(tensors, *host_out); };
  return submit("recv", c10d::OpType::RECV, tensors, std::move(job));
}

c10::intrusive_ptr<c10d::Work> HostBackend::barrier(const c10d::BarrierOptions& opts) {
  auto job = std::make_unique<Job>();
  {
    exec::StrictScope strict;
    runtime::flush_pending_work();
  }
  job->signature = signature("barrier", {}, {});
  job->issue = [opts](c10d::Backend& gloo, Job&) { return Works{gloo.barrier(opts)}; };
  return submit("barrier", c10d::OpType::BARRIER, {}, std::move(job));
}

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
