// Binning rules shared by torch.histogram and torch.histogramdd (ATen serves both with one
// kernel, so both follow the same edge, closed-last-bin and search rules here).
#pragma once

#include <ATen/core/Tensor.h>

namespace tpu::aten {

// bins + 1 equally spaced edges over [lo, hi]; an empty span (lo == hi) is widened by 0.5 on
// each side, as numpy and ATen do.
at::Tensor uniform_bin_edges(double lo, double hi, int64_t bins, const at::TensorOptions& options);

// Whether each element of x lies within [edges[0], edges[-1]] (NaN: no).
at::Tensor within_edges(const at::Tensor& x, const at::Tensor& edges);

// The bin (0 .. edges.numel() - 2) of each element of x within the edges; the last bin is closed.
// sorted_edges: the edges are known to increase (a searchsorted); otherwise ATen's binary search
// is replayed, which bins unsorted edges (ATen accepts them unchecked) exactly as the CPU does.
at::Tensor bin_of(const at::Tensor& x, const at::Tensor& edges, bool sorted_edges);

}  // namespace tpu::aten
