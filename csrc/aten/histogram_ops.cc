// torch.histogram: bin edges from a count (over `range`, or the data's min and max - one host
// read) or given as a tensor; every element lands in the bin whose edges bracket it (the last
// bin is closed), found with the rules shared with histogramdd (histogram_bins.h) and summed with
// scatter_add, all on the device.
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/histogram_bins.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

std::tuple<at::Tensor, at::Tensor> histogram_with_edges(const at::Tensor& self, const at::Tensor& edges,
                                                        const std::optional<at::Tensor>& weight, bool density,
                                                        bool sorted_edges) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "torch.histogram: input tensor must be floating point, got ",
              self.scalar_type());
  TORCH_CHECK(edges.dim() == 1 && edges.numel() >= 2, "torch.histogram: bins tensor should have one dimension and at least 2 elements, but got ",
              edges.sizes());
  const bool weighted = weight.has_value() && weight->defined();
  TORCH_CHECK(!weighted || weight->sizes() == self.sizes(), "torch.histogram: if weight tensor is provided it should have the same shape as the input tensor");
  const int64_t bins = edges.numel() - 1;
  at::Tensor x = self.reshape({-1});
  at::Tensor e = edges.to(self.scalar_type());
  at::Tensor inside = within_edges(x, e);
  at::Tensor bucket = bin_of(x, e, sorted_edges);
  at::Tensor w = weighted ? weight->reshape({-1}).to(self.scalar_type()) : at::ones_like(x);
  w = at::where(inside, w, at::zeros({}, w.options()));
  at::Tensor hist = at::zeros({bins}, self.options()).scatter_add_(0, bucket, w);
  if (density) {
    at::Tensor widths = e.narrow(0, 1, bins) - e.narrow(0, 0, bins);
    hist = hist / (hist.sum() * widths);
  }
  return {hist, e};
}

at::Tensor edges_from_count(const at::Tensor& self, int64_t bins, std::optional<at::ArrayRef<double>> range) {
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  double lo = 0, hi = 1;  // ATen's edges for empty input without a range
  if (range.has_value()) {
    TORCH_CHECK(range->size() == 2, "torch.histogram: range should have 2 elements, got ", range->size());
    lo = (*range)[0];
    hi = (*range)[1];
  } else if (self.numel() > 0) {
    lo = self.min().item<double>();  // data-dependent edges: one host read
    hi = self.max().item<double>();
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histogram: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histogram: min should not exceed max, but got min ", lo, " max ", hi);
  return uniform_bin_edges(lo, hi, bins, self.options());
}

std::tuple<at::Tensor, at::Tensor> k_histogram_bin_ct(const at::Tensor& self, int64_t bins,
                                                      std::optional<at::ArrayRef<double>> range,
                                                      const std::optional<at::Tensor>& weight, bool density) {
  return histogram_with_edges(self, edges_from_count(self, bins, range), weight, density, /*sorted_edges=*/true);
}

std::tuple<at::Tensor, at::Tensor> k_histogram_bins_tensor(const at::Tensor& self, const at::Tensor& bins,
                                                           const std::optional<at::Tensor>& weight, bool density) {
  return histogram_with_edges(self, bins, weight, density, /*sorted_edges=*/false);
}

std::tuple<at::Tensor&, at::Tensor&> k_histogram_bin_ct_out(const at::Tensor& self, int64_t bins,
                                                            std::optional<at::ArrayRef<double>> range,
                                                            const std::optional<at::Tensor>& weight, bool density,
                                                            at::Tensor& hist, at::Tensor& bin_edges) {
  auto [h, e] = k_histogram_bin_ct(self, bins, range, weight, density);
  write_out(h, hist);
  write_out(e, bin_edges);
  return {hist, bin_edges};
}

std::tuple<at::Tensor&, at::Tensor&> k_histogram_bins_tensor_out(const at::Tensor& self, const at::Tensor& bins,
                                                                 const std::optional<at::Tensor>& weight, bool density,
                                                                 at::Tensor& hist, at::Tensor& bin_edges) {
  auto [h, e] = k_histogram_bins_tensor(self, bins, weight, density);
  write_out(h, hist);
  write_out(e, bin_edges);
  return {hist, bin_edges};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histogram.bin_ct", k_histogram_bin_ct);
  m.impl("histogram.bins_tensor", k_histogram_bins_tensor);
  m.impl("histogram.bin_ct_out", k_histogram_bin_ct_out);
  m.impl("histogram.bins_tensor_out", k_histogram_bins_tensor_out);
}

}  // namespace
}  // namespace tpu::aten
