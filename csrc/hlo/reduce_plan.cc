#include "hlo/reduce_plan.h"

#include <vector>

namespace tpu::hlo {
namespace {

// A trailing run of reduced elements shorter than this stays one reduce.
constexpr int64_t kMinRun = 256;
// Fewer rows than this (a reduction to a handful of values): the run is also split into blocks,
// so the first stage has rows to work on in parallel.
constexpr int64_t kFewRows = 16;
// Block lengths tried for that split, in order of preference.
constexpr int64_t kBlocks[] = {1024, 512, 256, 2048, 4096};

int64_t product(const Dims& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

}  // namespace

ReducePlan plan_reduce(const Dims& in, const Dims& reduce_dims) {
  ReducePlan plan;
  const size_t n = in.size();
  std::vector<bool> reduced(n, false);
  for (int64_t d : reduce_dims) reduced[static_cast<size_t>(d)] = true;
  for (int64_t s : in) {
    if (s == 0) return plan;
  }
  size_t k = n;  // dims [k, n) are the trailing run of reduced dimensions
  while (k > 0 && reduced[k - 1]) --k;
  if (k == n) return plan;
  const int64_t run = product(in, k, n);
  if (run < kMinRun) return plan;
  const int64_t rows = product(in, 0, k);
  Dims lead(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(k));
  Dims lead_reduced;
  for (size_t i = 0; i < k; ++i) {
    if (reduced[i]) lead_reduced.push_back(static_cast<int64_t>(i));
  }
  if (rows < kFewRows) {
    for (int64_t block : kBlocks) {
      if (run % block != 0 || run / block < 2) continue;
      plan.staged = plan.split = true;
      plan.rows = {rows * (run / block), block};
      plan.middle = lead;
      plan.middle.push_back(run / block);
      plan.second = lead_reduced;
      plan.second.push_back(static_cast<int64_t>(k));
      return plan;
    }
  }
  // Already a rank-2 row reduction (or a rank-1 one): XLA's own form.
  if (lead_reduced.empty() && k <= 1) return plan;
  plan.staged = true;
  plan.rows = {rows, run};
  plan.middle = lead;
  plan.second = lead_reduced;
  return plan;
}

}  // namespace tpu::hlo
