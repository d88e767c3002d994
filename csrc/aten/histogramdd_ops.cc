// torch.histogramdd: the histogram of M points in N dimensions (the input's last dimension).
// Edges per dimension come from a count (linspace over `range`, or the data's per-dimension min
// and max - one host read) or are given as tensors. Each point's bin is found per dimension,
// flattened to one index and summed with scatter_add, all on the device. Checks and messages
// follow ATen's (aten/src/ATen/native/Histogram.cpp), so bad input raises the same errors.
#include <torch/library.h>

#include <vector>

#include "aten/histogram_bins.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

void check_points(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  // ATen's dtype dispatch error, raised as it raises it (NotImplementedError in Python).
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
                              "\"histogramdd\" not implemented for '", self.scalar_type(), "'");
}

void check_edges_and_weight(const at::Tensor& self, at::TensorList edges, const std::optional<at::Tensor>& weight) {
  const int64_t n = self.size(-1);
  TORCH_CHECK(static_cast<int64_t>(edges.size()) == n, "torch.histogramdd: expected ", n,
              " sequences of bin edges for a ", n, "-dimensional histogram but got ", edges.size());
  for (int64_t d = 0; d < n; ++d) {
    const at::Tensor& e = edges[d];
    TORCH_CHECK(self.dtype() == e.dtype(), "torch.histogramdd: input tensor and bins tensors should have the same dtype, ",
                "but got input with dtype ", self.dtype(), " and bins for dimension ", d, " with dtype ", e.dtype());
    TORCH_CHECK(e.dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ", e.dim(),
                " dimensions in the bins tensor for dimension ", d);
    TORCH_CHECK(e.numel() > 0, "torch.histogramdd: bins tensor should have at least 1 element, but got ", e.numel(),
                " elements in the bins tensor for dimension ", d);
  }
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(self.dtype() == weight->dtype(), "torch.histogramdd: if weight tensor is provided, input tensor and ",
                "weight tensor should have the same dtype, but got input(", self.dtype(), "), and weight(",
                weight->dtype(), ")");
    TORCH_CHECK(weight->sizes() == self.sizes().slice(0, self.dim() - 1),
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor ",
                "excluding its innermost dimension, but got input with shape ", self.sizes(), " and weight with shape ",
                weight->sizes());
  }
  for (int64_t d = 0; d < n; ++d) {
    const int64_t bins = edges[d].numel() - 1;
    TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension ", d);
  }
}

// Uniform edges per dimension: over `range`, or the data's min and max (empty input: [0, 1]).
std::vector<at::Tensor> edges_from_counts(const at::Tensor& self, at::IntArrayRef bin_ct,
                                          std::optional<at::ArrayRef<double>> range) {
  check_points(self);
  const int64_t n = self.size(-1);
  std::vector<double> lo(n, 0.0), hi(n, 1.0);
  if (range.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * n, "torch.histogramdd: for a ", n,
                "-dimensional histogram range should have ", 2 * n, " elements, but got ", range->size());
    for (int64_t d = 0; d < n; ++d) {
      lo[d] = (*range)[2 * d];
      hi[d] = (*range)[2 * d + 1];
    }
  } else if (self.numel() > 0) {
    at::Tensor points = self.reshape({-1, n});
    // Data-dependent edges: both extremes of every dimension in one host read.
    at::Tensor ends = at::stack({points.amin(0), points.amax(0)}).cpu().to(at::kDouble);
    auto acc = ends.accessor<double, 2>();
    for (int64_t d = 0; d < n; ++d) {
      lo[d] = acc[0][d];
      hi[d] = acc[1][d];
    }
  }
  for (int64_t d = 0; d < n; ++d) {
    TORCH_CHECK(std::isfinite(lo[d]) && std::isfinite(hi[d]), "torch.histogramdd: dimension ", d, "'s range [", lo[d],
                ", ", hi[d], "] is not finite");
    TORCH_CHECK(lo[d] <= hi[d], "torch.histogramdd: min should not exceed max, but got min ", lo[d], " max ", hi[d],
                " for dimension ", d);
  }
  TORCH_CHECK(static_cast<int64_t>(bin_ct.size()) == n,
              "histogramdd: The size of bins must be equal to the innermost dimension of the input.");
  std::vector<at::Tensor> edges;
  edges.reserve(n);
  for (int64_t d = 0; d < n; ++d) edges.push_back(uniform_bin_edges(lo[d], hi[d], bin_ct[d], self.options()));
  return edges;
}

// Bins every point: the bin index per dimension (the last bin is closed), flattened row-major;
// points outside the edges of any dimension (and NaNs) count nothing.
at::Tensor histogram_from_edges(const at::Tensor& self, at::TensorList edges, const std::optional<at::Tensor>& weight,
                                bool density, bool sorted_edges) {
  const int64_t n = self.size(-1);
  at::Tensor points = self.reshape({-1, n});
  const int64_t m = points.size(0);
  std::vector<int64_t> bins(n);
  at::Tensor flat = at::zeros({m}, self.options().dtype(at::kLong));
  at::Tensor inside = at::ones({m}, self.options().dtype(at::kBool));
  for (int64_t d = 0; d < n; ++d) {
    const at::Tensor& e = edges[d];
    bins[d] = e.numel() - 1;
    at::Tensor x = points.select(1, d);
    inside = inside.logical_and(within_edges(x, e));
    flat = flat * bins[d] + bin_of(x, e, sorted_edges);
  }
  const bool weighted = weight.has_value() && weight->defined();
  at::Tensor w = weighted ? weight->reshape({-1}) : at::ones({m}, self.options());
  w = at::where(inside, w, at::zeros({}, w.options()));
  at::Tensor hist = at::zeros({c10::multiply_integers(bins)}, self.options()).scatter_add_(0, flat, w).reshape(bins);
  if (density) {  // ATen's order: by the total, then by each dimension's bin widths
    hist = hist / hist.sum();
    for (int64_t d = 0; d < n; ++d) {
      std::vector<int64_t> shape(n, 1);
      shape[d] = bins[d];
      at::Tensor widths = edges[d].narrow(0, 1, bins[d]) - edges[d].narrow(0, 0, bins[d]);
      hist = hist / widths.reshape(shape);
    }
  }
  return hist;
}

std::vector<at::Tensor> k_bin_edges(const at::Tensor& self, at::IntArrayRef bins,
                                    std::optional<at::ArrayRef<double>> range, const std::optional<at::Tensor>& weight,
                                    bool density) {
  return edges_from_counts(self, bins, range);
}

at::Tensor k_from_bin_cts(const at::Tensor& self, at::IntArrayRef bins, std::optional<at::ArrayRef<double>> range,
                          const std::optional<at::Tensor>& weight, bool density) {
  std::vector<at::Tensor> edges = edges_from_counts(self, bins, range);
  check_edges_and_weight(self, edges, weight);
  return histogram_from_edges(self, edges, weight, density, /*sorted_edges=*/true);
}

at::Tensor k_from_bin_tensors(const at::Tensor& self, at::TensorList bins, const std::optional<at::Tensor>& weight,
                              bool density) {
  check_points(self);
  check_edges_and_weight(self, bins, weight);
  return histogram_from_edges(self, bins, weight, density, /*sorted_edges=*/false);
}

void k_bin_edges_out(const at::Tensor& self, at::IntArrayRef bins, std::optional<at::ArrayRef<double>> range,
                     const std::optional<at::Tensor>& weight, bool density, at::TensorList out) {
  std::vector<at::Tensor> edges = k_bin_edges(self, bins, range, weight, density);
  TORCH_CHECK(out.size() == edges.size(), "torch.histogramdd: expected ", edges.size(), " bin edge outputs, got ",
              out.size());
  for (size_t d = 0; d < edges.size(); ++d) {
    at::Tensor dst = out[d];
    write_out(edges[d], dst);
  }
}

at::Tensor& k_from_bin_cts_out(const at::Tensor& self, at::IntArrayRef bins, std::optional<at::ArrayRef<double>> range,
                               const std::optional<at::Tensor>& weight, bool density, at::Tensor& out) {
  return write_out(k_from_bin_cts(self, bins, range, weight, density), out);
}

at::Tensor& k_from_bin_tensors_out(const at::Tensor& self, at::TensorList bins, const std::optional<at::Tensor>& weight,
                                   bool density, at::Tensor& out) {
  return write_out(k_from_bin_tensors(self, bins, weight, density), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_histogramdd_bin_edges", k_bin_edges);
  m.impl("_histogramdd_bin_edges.out", k_bin_edges_out);
  m.impl("_histogramdd_from_bin_cts", k_from_bin_cts);
  m.impl("_histogramdd_from_bin_cts.out", k_from_bin_cts_out);
  m.impl("_histogramdd_from_bin_tensors", k_from_bin_tensors);
  m.impl("_histogramdd_from_bin_tensors.out", k_from_bin_tensors_out);
}

}  // namespace
}  // namespace tpu::aten
