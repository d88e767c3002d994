// Binning rules shared by torch.histogram and torch.histogramdd (see histogram_bins.h).
#include "aten/histogram_bins.h"

#include <ATen/ATen.h>

namespace tpu::aten {
namespace {

// std::upper_bound's own probe sequence, run for every element at once: the index of the first
// edge above x for sorted edges, and the CPU's answer for unsorted ones.
at::Tensor upper_bound(const at::Tensor& edges, const at::Tensor& x) {
  const int64_t n = edges.numel();
  at::Tensor first = at::zeros(x.sizes(), x.options().dtype(at::kLong));
  at::Tensor len = at::full(x.sizes(), n, first.options());
  at::Tensor zero = at::zeros({}, first.options());
  for (int64_t longest = n; longest > 0; longest >>= 1) {  // every step at least halves `len`
    at::Tensor half = at::floor_divide(len, 2);
    at::Tensor mid = first + half;
    at::Tensor probe = edges.index_select(0, mid.clamp_max(n - 1).reshape({-1})).reshape(x.sizes());
    at::Tensor active = len > 0;
    at::Tensor go_left = x < probe;
    first = at::where(active.logical_and(go_left.logical_not()), mid + 1, first);
    len = at::where(active, at::where(go_left, half, len - half - 1), zero);
  }
  return first;
}

}  // namespace

at::Tensor uniform_bin_edges(double lo, double hi, int64_t bins, const at::TensorOptions& options) {
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  return at::linspace(lo, hi, bins + 1, options);
}

at::Tensor within_edges(const at::Tensor& x, const at::Tensor& edges) {
  return (x >= edges.select(0, 0)).logical_and(x <= edges.select(0, edges.numel() - 1));
}

at::Tensor bin_of(const at::Tensor& x, const at::Tensor& edges, bool sorted_edges) {
  const int64_t bins = edges.numel() - 1;
  at::Tensor above = sorted_edges ? at::searchsorted(edges, x, /*out_int32=*/false, /*right=*/true) : upper_bound(edges, x);
  return (above - 1).clamp(0, bins - 1);
}

}  // namespace tpu::aten
