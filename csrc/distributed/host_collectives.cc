// The collectives of the host transport: each queues a job whose host tensors Gloo works on
// (host_backend.h for the pipeline), with AVG and PREMUL_SUM built on SUM.
#include <ATen/ATen.h>

#include "distributed/host_backend.h"
#include "distributed/host_staging.h"
#include "exec/execution_mode.h"
#include "runtime/pending_work.h"

namespace tpu::distributed {

namespace {

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
  for (const auto& t : ts) {
    runtime::flush_pending_work_on(t.device().index());  // a collective ends its device's pending graph
  }
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(snapshot(t));
  return out;
}


}  // namespace

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


}  // namespace tpu::distributed
