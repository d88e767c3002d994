// unique, unique_consecutive and their dim= forms, assembled from tpu sort, cumsum and scatter.
// Elements (or slices along dim, compared as rows) are sorted, the first of each run of equal
// ones is flagged, and the run index of every element gives inverse and counts. The number
// of unique values is data-dependent: reading it is one host sync.
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

at::Tensor empty_long(const at::Tensor& like) { return at::empty({0}, like.options().dtype(at::kLong)); }

// rows: [n, k] (already in the order runs are looked for); order: the permutation that
// produced them from the input (undefined when none). Returns (first-of-run flags, run ids).
std::pair<at::Tensor, at::Tensor> runs(const at::Tensor& rows) {
  const int64_t n = rows.size(0);
  at::Tensor flags = at::ones({n}, rows.options().dtype(at::kBool));
  if (n > 1 && rows.size(1) > 0) {
    flags.narrow(0, 1, n - 1).copy_((rows.narrow(0, 1, n - 1) != rows.narrow(0, 0, n - 1)).any(1));
  } else if (n > 1) {
    flags.narrow(0, 1, n - 1).fill_(false);
  }
  return {flags, at::cumsum(flags, 0) - 1};
}

// `count` unique values/slices; `group` the run index of each of the n sorted elements.
Result finish(const at::Tensor& unique, int64_t count, const at::Tensor& group, const at::Tensor& order, int64_t n,
              const at::Tensor& like, at::IntArrayRef inverse_shape, bool return_inverse, bool return_counts) {
  at::Tensor inverse = empty_long(like), counts = empty_long(like);
  if (return_inverse) {
    inverse = order.defined() ? at::empty({n}, like.options().dtype(at::kLong)).scatter_(0, order, group) : group;
    inverse = inverse.reshape(inverse_shape);
  }
  if (return_counts) {
    counts = at::zeros({count}, like.options().dtype(at::kLong)).scatter_add_(0, group, at::ones_like(group));
  }
  return {unique, inverse, counts};
}

// Elementwise unique of the flattened input.
Result unique_flat(const at::Tensor& self, bool sort, bool return_inverse, bool return_counts) {
  at::Tensor flat = self.reshape({-1});
  at::Tensor order;
  if (sort) std::tie(flat, order) = at::sort(flat, 0);
  auto [flags, group] = runs(flat.unsqueeze(1));
  at::Tensor unique = at::masked_select(flat, flags);
  return finish(unique, unique.numel(), group, order, flat.numel(), self, self.sizes(), return_inverse, return_counts);
}

// Unique slices along `dim`, compared as whole rows; `sort` orders them lexicographically.
Result unique_slices(const at::Tensor& self, int64_t dim, bool sort, bool return_inverse, bool return_counts) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(dim);
  TORCH_CHECK(n > 0 || self.numel() == 0, "unique_dim: invalid input");
  at::Tensor moved = self.movedim(dim, 0);
  std::vector<int64_t> rest(moved.sizes().begin() + 1, moved.sizes().end());
  int64_t k = 1;
  for (int64_t v : rest) k *= v;
  at::Tensor rows = moved.reshape({n, k});
  at::Tensor order;
  if (sort && n > 0) {
    // Lexicographic order: stable sorts by each column, last column first.
    order = at::arange(n, self.options().dtype(at::kLong));
    for (int64_t c = k - 1; c >= 0; --c) {
      at::Tensor key = rows.index_select(0, order).select(1, c);
      order = order.index_select(0, std::get<1>(at::sort(key, /*stable=*/true, 0, false)));
    }
    rows = rows.index_select(0, order);
  }
  auto [flags, group] = runs(rows);
  at::Tensor unique = rows.index_select(0, at::nonzero(flags).reshape({-1}));
  const int64_t count = unique.size(0);
  std::vector<int64_t> shape{count};
  shape.insert(shape.end(), rest.begin(), rest.end());
  unique = unique.reshape(shape).movedim(0, dim);
  return finish(unique, count, group, order, n, self, {n}, return_inverse, return_counts);
}

Result k_unique2(const at::Tensor& self, bool sorted, bool return_inverse, bool return_counts) {
  return unique_flat(self, true, return_inverse, return_counts);  // always sorted, as on CPU
}

Result k_unique_dim(const at::Tensor& self, int64_t dim, bool sorted, bool return_inverse, bool return_counts) {
  return unique_slices(self, dim, true, return_inverse, return_counts);
}

Result k_unique_dim_consecutive(const at::Tensor& self, int64_t dim, bool return_inverse, bool return_counts) {
  return unique_slices(self, dim, false, return_inverse, return_counts);
}

Result k_unique_consecutive(const at::Tensor& self, bool return_inverse, bool return_counts, std::optional<int64_t> dim) {
  if (dim.has_value() && self.dim() > 0) return unique_slices(self, *dim, false, return_inverse, return_counts);
  return unique_flat(self, false, return_inverse, return_counts);
}

// The older form (index_fill's backward uses it): values and inverse indices.
std::tuple<at::Tensor, at::Tensor> k_unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto result = unique_flat(self, true, return_inverse, false);
  return {std::get<0>(result), std::get<1>(result)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_unique", k_unique);
  m.impl("_unique2", k_unique2);
  m.impl("unique_dim", k_unique_dim);
  m.impl("unique_dim_consecutive", k_unique_dim_consecutive);
  m.impl("unique_consecutive", k_unique_consecutive);
}

}  // namespace
}  // namespace tpu::aten
