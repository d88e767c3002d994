// The collectives of the device transport: each one XLA program over the group (device_backend.h
// for how it is launched), with ordinary tpu ops around it for what is rank-specific.
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>

#include "aten/op_runner.h"
#include "distributed/device_backend.h"
#include "exec/execution_mode.h"

namespace tpu::distributed {

namespace {

// "float32[4, 2], int64[3]": what a collective runs on, for the ranks' comparison.
std::string list(const std::vector<at::Tensor>& ts) {
  std::string s;
  for (const auto& t : ts) s += (s.empty() ? "" : ", ") + describe(t);
  return s;
}

// Flat contiguous pieces padded to `chunk` elements and concatenated.
at::Tensor packed(const std::vector<at::Tensor>& pieces, int64_t chunk, const at::TensorOptions& opts) {
  std::vector<at::Tensor> padded;
  padded.reserve(pieces.size());
  for (const auto& p : pieces) {
    at::Tensor flat = p.reshape({-1});
    padded.push_back(flat.numel() == chunk ? flat : at::constant_pad_nd(flat, {0, chunk - flat.numel()}));
  }
  return padded.empty() ? at::empty({0}, opts) : at::cat(padded);
}

// Runs the collective program `op` over `group` on `inputs` (dense), returning its outputs.
std::vector<at::Tensor> run_program(const exec::ReplicaGroup& group, const char* op, const char* label,
                                    const std::vector<at::Tensor>& inputs, size_t num_outputs,
                                    int64_t group_size, const std::function<void(aten::OpRunner&)>& extra) {
  aten::OpRunner r(op, label);
  r.over(&group);
  for (const auto& t : inputs) r.input(t);
  r.attrs().set_int("group_size", group_size);
  if (extra) extra(r);
  return r.run(num_outputs);
}

// The same with every output written back into its input (all dense buffers of their own): the
// program aliases each input to its output, and XLA reuses a donated input's memory instead of
// allocating (and page-faulting) a fresh buffer per collective.
void run_program_in_place(const exec::ReplicaGroup& group, const char* op, const char* label,
                          const std::vector<at::Tensor>& tensors, int64_t group_size,
                          const std::function<void(aten::OpRunner&)>& extra) {
  aten::OpRunner r(op, label);
  r.over(&group);
  for (const auto& t : tensors) r.input(t);
  r.attrs().set_int("group_size", group_size);
  if (extra) extra(r);
  r.run_into(tensors);
}

void set_reduction(aten::OpRunner& r, const Reduction& red) {
  r.attrs().set_int("combine", static_cast<int64_t>(red.combine));
  r.attrs().set_bool("mean", red.mean);
  if (red.premul) {
    r.attrs().set_bool("premul", true);
    r.input(*red.premul);
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> DeviceBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  const char* what = "all_reduce";
  check_device(check_tensors(tensors, what), what);
  const Reduction red = reduction(opts.reduceOp, tensors[0].scalar_type(), what);
  return collective(*group_, what, c10d::OpType::ALLREDUCE, "all_reduce " + red.name + " " + list(tensors),
                    tensors, [&] {
    std::vector<at::Tensor> in;
    for (const auto& t : tensors) in.push_back(dense(t));
    group_->round = kMeetsPerCollective * seq_++;
    run_program_in_place(*group_, "all_reduce", "c10d::allreduce_", in, getSize(),
                         [&](aten::OpRunner& r) { set_reduction(r, red); });
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!in[i].is_same(tensors[i])) tensors[i].copy_(in[i]);
    }
  }, /*same_on_every_rank=*/true);
}


std::vector<at::Tensor> DeviceBackend::run_over_group(
    const std::string& label, const std::vector<at::Tensor>& inputs,
    const std::function<std::vector<at::Tensor>(const exec::ReplicaGroup&)>& body) {
  const char* what = "a kernel with collectives";
  if (!inputs.empty()) check_device(check_tensors(inputs, what), what);
  std::vector<at::Tensor> outputs;
  collective(*group_, what, c10d::OpType::UNKNOWN, "kernel " + label + " " + list(inputs), {}, [&] {
    group_->round = kMeetsPerCollective * seq_++;
    outputs = body(*group_);
  }, /*same_on_every_rank=*/true);
  return outputs;
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  const char* what = "broadcast";
  check_device(check_tensors(tensors, what), what);
  const int root = check_root(opts.rootRank, what);
  return collective(*group_, what, c10d::OpType::BROADCAST,
                    "broadcast from " + std::to_string(root) + " " + list(tensors), tensors, [&] {
    // Every rank passes its tensor; the program keeps only the root's (lowering/collectives.cc).
    std::vector<at::Tensor> in;
    for (const auto& t : tensors) in.push_back(dense(t));
    group_->round = kMeetsPerCollective * seq_++;
    run_program_in_place(*group_, "broadcast_bits", "c10d::broadcast_", in, getSize(),
                         [&](aten::OpRunner& r) { r.attrs().set_int("root", root); });
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!in[i].is_same(tensors[i])) tensors[i].copy_(in[i]);
    }
  }, /*same_on_every_rank=*/true);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  const char* what = "reduce";
  check_device(check_tensors(tensors, what), what);
  const int root = check_root(opts.rootRank, what);
  const Reduction red = reduction(opts.reduceOp, tensors[0].scalar_type(), what);
  return collective(*group_, what, c10d::OpType::REDUCE,
                    "reduce " + red.name + " to " + std::to_string(root) + " " + list(tensors), tensors, [&] {
    // The same program on every rank: only the root's replica takes the result, the others
    // write back their input (lowering/collectives.cc), so it can join a recorded graph.
    std::vector<at::Tensor> in;
    for (const auto& t : tensors) in.push_back(dense(t));
    group_->round = kMeetsPerCollective * seq_++;
    run_program_in_place(*group_, "all_reduce", "c10d::reduce_", in, getSize(), [&](aten::OpRunner& r) {
      set_reduction(r, red);
      r.attrs().set_int("root", root);
    });
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!in[i].is_same(tensors[i])) tensors[i].copy_(in[i]);
    }
  }, /*same_on_every_rank=*/true);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  const char* what = "all_gather";
  TORCH_CHECK(inputs.size() == outputs.size(), where(what), ": one output list per input is needed");
  check_device(check_tensors(inputs, what), what);
  check_tensors(outputs, what);
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(static_cast<int>(outputs[i].size()) == getSize(), where(what), ": the output list has ",
                outputs[i].size(), " tensors for a group of ", getSize());
    for (const auto& o : outputs[i]) {
      TORCH_CHECK(o.numel() == inputs[i].numel() && o.scalar_type() == inputs[i].scalar_type(), where(what),
                  ": output ", describe(o), " does not match the input ", describe(inputs[i]));
    }
  }
  std::vector<at::Tensor> flat_outputs;
  for (const auto& l : outputs) flat_outputs.insert(flat_outputs.end(), l.begin(), l.end());
  return collective(*group_, what, c10d::OpType::ALLGATHER, "all_gather " + list(inputs), flat_outputs, [&] {
    std::vector<at::Tensor> in;
    for (const auto& t : inputs) in.push_back(dense(t));
    group_->round = kMeetsPerCollective * seq_++;
    auto out = run_program(*group_, "all_gather", "c10d::allgather_", in, in.size(), getSize(), nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t m = inputs[i].numel();
      for (int r = 0; r < getSize(); ++r) {
        outputs[i][r].copy_(out[i].narrow(0, r * m, m).view(outputs[i][r].sizes()));
      }
    }
  }, /*same_on_every_rank=*/true);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const char* what = "all_gather_into_tensor";
  check_device(check_tensors(inputs, what), what);
  check_tensors(outputs, what);
  check_gathered(outputs, inputs, what);
  return collective(*group_, what, c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor " + list(inputs),
                    outputs, [&] {
    std::vector<at::Tensor> in;
    for (const auto& t : inputs) in.push_back(dense(t));
    group_->round = kMeetsPerCollective * seq_++;
    auto out = run_program(*group_, "all_gather", "c10d::_allgather_base_", in, in.size(), getSize(), nullptr);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(out[i].view(outputs[i].sizes()));
  }, /*same_on_every_rank=*/true);
}



c10::intrusive_ptr<c10d::Work> DeviceBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor";
  check_device(check_tensors(inputs, what), what);
  check_tensors(outputs, what);
  check_scattered(outputs, inputs, what);
  const Reduction red = reduction(opts.reduceOp, inputs[0].scalar_type(), what);
  return collective(*group_, what, c10d::OpType::_REDUCE_SCATTER_BASE,
                    "reduce_scatter_tensor " + red.name + " " + list(inputs), outputs, [&] {
    std::vector<at::Tensor> in;
    for (const auto& t : inputs) in.push_back(dense(t));
    group_->round = kMeetsPerCollective * seq_++;
    auto out = run_program(*group_, "reduce_scatter", "c10d::_reduce_scatter_base_", in, in.size(), getSize(),
                           [&](aten::OpRunner& r) { set_reduction(r, red); });
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(out[i].view(outputs[i].sizes()));
  }, /*same_on_every_rank=*/true);
}


c10::intrusive_ptr<c10d::Work> DeviceBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter";
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1, where(what), ": one output and one input list");
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == getSize(), where(what), ": the input list has ",
              inputs[0].size(), " tensors for a group of ", getSize());
  for (const auto& t : inputs[0]) {
    TORCH_CHECK(t.numel() == outputs[0].numel() && t.scalar_type() == outputs[0].scalar_type(), where(what),
                ": input ", describe(t), " does not match the output ", describe(outputs[0]));
  }
  check_device(check_tensors(inputs, what), what);
  // The list's pieces, one after another, are a reduce_scatter_tensor input.
  std::vector<at::Tensor> ins;
  {
    exec::StrictScope strict;
    std::vector<at::Tensor> flat;
    for (const auto& t : inputs[0]) flat.push_back(t.reshape({-1}));
    ins.push_back(at::cat(flat));
  }
  return reduce_scatter_tensor_coalesced(outputs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::exchange(const char* what, c10d::OpType type,
                                                       std::vector<at::Tensor> inputs,
                                                       std::vector<at::Tensor> outputs,
                                                       std::vector<at::Tensor> work_outputs) {
  // Every rank learns every rank's piece sizes: the padded chunk (the largest piece anywhere)
  // must be the same in every rank's program, and rank i's piece for j must be what j expects.
  std::string mine = std::string(c10::getDtypeNames(inputs[0].scalar_type()).first) + ":";
  for (const auto& t : inputs) mine += std::to_string(t.numel()) + ",";
  mine += "|";
  for (const auto& t : outputs) mine += std::to_string(t.numel()) + ",";
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const uint64_t sizes_round = kMeetsPerCollective * seq_++;
  std::vector<std::string> all;
  try {
    all = meet(*group_, sizes_round, mine, what);
  } catch (...) {
    group_->rendezvous().abandon(getRank(), std::string("failed in ") + what);
    throw;
  }
  const int n = getSize();
  std::vector<std::vector<int64_t>> send(n), recv(n);
  std::vector<std::string> dtypes(n);
  for (int r = 0; r < n; ++r) {
    const std::string& p = all[r];
    const size_t colon = p.find(':'), bar = p.find('|');
    dtypes[r] = p.substr(0, colon);
    auto parse = [](const std::string& s) {
      std::vector<int64_t> v;
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t comma = s.find(',', pos);
        v.push_back(std::stoll(s.substr(pos, comma - pos)));
        pos = comma + 1;
      }
      return v;
    };
    send[r] = parse(p.substr(colon + 1, bar - colon - 1));
    recv[r] = parse(p.substr(bar + 1));
  }
  int64_t chunk = 0;
  for (int i = 0; i < n; ++i) {
    TORCH_CHECK(dtypes[i] == dtypes[0], where(what), ": rank 0 sends ", dtypes[0], " but rank ", i,
                " sends ", dtypes[i], ". Fix: use the same dtype on every rank");
    for (int j = 0; j < n; ++j) {
      TORCH_CHECK(send[i][j] == recv[j][i], where(what), ": rank ", i, " sends ", send[i][j],
                  " elements to rank ", j, ", which expects ", recv[j][i], " from it. Fix: make every "
                  "rank's output split sizes match what the other ranks send it");
      chunk = std::max(chunk, send[i][j]);
    }
  }
  const at::TensorOptions opts = inputs[0].options();
  // Even pieces (every rank sends and receives `chunk` elements to and from each) need no
  // rank-specific padding.
  bool even = true;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) even = even && send[i][j] == chunk;
  }
  return collective(*group_, what, type, std::string(what) + " " + dtypes[0] + " chunk " + std::to_string(chunk),
                    work_outputs, [&] {
    at::Tensor in = packed(inputs, chunk, opts);
    group_->round = kMeetsPerCollective * seq_++;
    auto out = run_program(*group_, "all_to_all", "c10d::alltoall_", {in}, 1, n, nullptr);
    for (int i = 0; i < n; ++i) {
      if (outputs[i].numel() == 0) continue;
      outputs[i].copy_(out[0].narrow(0, i * chunk, outputs[i].numel()).view(outputs[i].sizes()));
    }
  }, even);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits,
                                                            const c10d::AllToAllOptions& opts) {
  const char* what = "all_to_all_single";
  check_device(check_tensors({input, output}, what), what);
  const int n = getSize();
  auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    std::vector<int64_t> r(splits);
    const int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
    if (r.empty()) {
      TORCH_CHECK(dim0 % n == 0, where(what), ": the ", which, " ", describe(t), " does not split into ", n,
                  " equal parts; pass split sizes");
      r.assign(n, dim0 / n);
    }
    TORCH_CHECK(static_cast<int>(r.size()) == n, where(what), ": ", r.size(), " ", which,
                " split sizes for a group of ", n);
    int64_t total = 0;
    for (int64_t s : r) total += s;
    TORCH_CHECK(total == dim0, where(what), ": the ", which, " split sizes add up to ", total, " rows, the ",
                which, " has ", dim0);
    return r;
  };
  const auto in_rows = rows(input, input_splits, "input");
  const auto out_rows = rows(output, output_splits, "output");
  std::vector<at::Tensor> ins, outs;
  {
    exec::StrictScope strict;
    int64_t at_row = 0;
    for (int64_t r : in_rows) { ins.push_back(input.narrow(0, at_row, r)); at_row += r; }
    at_row = 0;
    for (int64_t r : out_rows) { outs.push_back(output.narrow(0, at_row, r)); at_row += r; }
  }
  return exchange(what, c10d::OpType::ALLTOALL_BASE, ins, outs, {output});
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  const char* what = "all_to_all";
  TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
              where(what), ": one input and one output tensor per rank are needed");
  check_device(check_tensors(inputs, what), what);
  check_tensors(outputs, what);
  return exchange(what, c10d::OpType::ALLTOALL, inputs, outputs, outputs);
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  const char* what = "gather";
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(inputs.size() == 1, where(what), ": one input tensor per rank");
  check_device(check_tensors(inputs, what), what);
  if (getRank() == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), where(what),
                ": the root needs one output tensor per rank");
    check_tensors(outputs, what);
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), where(what), ": only the root passes outputs");
  }
  std::vector<at::Tensor> work_outputs = getRank() == root ? outputs[0] : std::vector<at::Tensor>{};
  return collective(*group_, what, c10d::OpType::GATHER,
                    "gather to " + std::to_string(root) + " " + list(inputs), work_outputs, [&] {
    std::vector<at::Tensor> in{dense(inputs[0])};
    group_->round = kMeetsPerCollective * seq_++;
    auto out = run_program(*group_, "all_gather", "c10d::gather_", in, 1, getSize(), nullptr);
    if (getRank() != root) return;
    const int64_t m = inputs[0].numel();
    for (int r = 0; r < getSize(); ++r) {
      TORCH_CHECK(outputs[0][r].numel() == m, where(what), ": output ", r, " ", describe(outputs[0][r]),
                  " does not match the input ", describe(inputs[0]));
      outputs[0][r].copy_(out[0].narrow(0, r * m, m).view(outputs[0][r].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  const char* what = "scatter";
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(outputs.size() == 1, where(what), ": one output tensor per rank");
  check_device(check_tensors(outputs, what), what);
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), where(what),
                ": the root needs one input tensor per rank");
    check_tensors(inputs, what);
    for (const auto& t : inputs[0]) {
      TORCH_CHECK(t.numel() == outputs[0].numel() && t.scalar_type() == outputs[0].scalar_type(), where(what),
                  ": input ", describe(t), " does not match the output ", describe(outputs[0]));
    }
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), where(what), ": only the root passes inputs");
  }
  return collective(*group_, what, c10d::OpType::SCATTER,
                    "scatter from " + std::to_string(root) + " " + list(outputs), outputs, [&] {
    // all_to_all: the root's chunk j goes to rank j; every rank keeps what the root sent.
    const int64_t m = outputs[0].numel();
    at::Tensor in;
    if (getRank() == root) {
      std::vector<at::Tensor> flat;
      for (const auto& t : inputs[0]) flat.push_back(t.reshape({-1}));
      in = at::cat(flat);
    } else {
      in = at::zeros({m * getSize()}, outputs[0].options());
    }
    group_->round = kMeetsPerCollective * seq_++;
    auto out = run_program(*group_, "all_to_all", "c10d::scatter_", {in}, 1, getSize(), nullptr);
    outputs[0].copy_(out[0].narrow(0, root * m, m).view(outputs[0].sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> DeviceBackend::barrier(const c10d::BarrierOptions& opts) {
  const char* what = "barrier";
  at::Tensor one;
  {
    exec::StrictScope strict;
    one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(c10::Device(c10::DeviceType::PrivateUse1, device_)));
  }
  std::vector<at::Tensor> ts{one};
  c10d::AllreduceOptions o;
  allreduce(ts, o);
  // A barrier returns once every rank's earlier work is done.
  (void)one.cpu();
  auto work = c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::BARRIER, what,
                                           c10::Device(c10::DeviceType::PrivateUse1, device_),
                                           std::vector<at::Tensor>{});
  work->succeed();
  return work;
}


}  // namespace tpu::distributed
