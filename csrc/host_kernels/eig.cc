#include "host_kernels/eig.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "host_kernels/ffi_call_frame.h"

namespace tpu::host_kernels {
namespace {

using ffi_abi::Buffer;

// LAPACK's ?geev (Fortran calling convention: every argument by pointer; 32-bit integers, as in
// the LP64 LAPACK libtorch links).
template <typename R>
using RealGeev = void(const char*, const char*, const int*, R*, const int*, R*, R*, R*, const int*, R*,
                          const int*, R*, const int*, int*);
template <typename R>
using ComplexGeev = void(const char*, const char*, const int*, std::complex<R>*, const int*, std::complex<R>*,
                             std::complex<R>*, const int*, std::complex<R>*, const int*, std::complex<R>*,
                             const int*, R*, int*);

void* lapack(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// One routine per instantiation (each routine type has one name), looked up once, thread-safely.
template <typename T>
T* routine(const char* name) {
  static T* const f = reinterpret_cast<T*>(lapack(name));
  return f;
}

constexpr const char* kNotFinite = "torch.linalg.eig: input tensor should not contain infs or NaNs.";

std::string not_converged(int info) {
  return "torch.linalg.eig: The algorithm failed to converge because the input matrix is ill-conditioned or has "
         "too many repeated eigenvalues (error code: " + std::to_string(info) + ").";
}

// Column-major copy of a row-major n x n matrix (LAPACK's layout): the transpose.
template <typename T>
void to_column_major(const T* a, int n, std::vector<T>& out) {
  out.resize(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) out[static_cast<size_t>(j) * n + i] = a[static_cast<size_t>(i) * n + j];
}

template <typename T>
bool finite(const T* a, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(std::abs(a[i]))) return false;
  return true;
}

// One real matrix: w[n], v[n, n] (row-major, columns are vectors; nullptr: values only).
template <typename R>
std::string eig_real(RealGeev<R>* geev, const R* a, int n, std::complex<R>* w, std::complex<R>* v) {
  std::vector<R> col, wr(n), wi(n), vr(v ? static_cast<size_t>(n) * n : 1);
  to_column_major(a, n, col);
  const char jobvl = 'N', jobvr = v ? 'V' : 'N';
  const int ldv = v ? n : 1, query = -1;
  int info = 0;
  R size = 0;
  R none = 0;
  geev(&jobvl, &jobvr, &n, col.data(), &n, wr.data(), wi.data(), &none, &ldv, vr.data(), &ldv, &size, &query, &info);
  int lwork = std::max(1, static_cast<int>(size));
  std::vector<R> work(lwork);
  geev(&jobvl, &jobvr, &n, col.data(), &n, wr.data(), wi.data(), &none, &ldv, vr.data(), &ldv, work.data(), &lwork,
       &info);
  if (info != 0) return not_converged(info);
  for (int j = 0; j < n; ++j) w[j] = {wr[j], wi[j]};
  if (v == nullptr) return "";
  // A complex pair (wi[j] > 0) has its vectors in columns j and j + 1 as real and imaginary parts.
  for (int j = 0; j < n; ++j) {
    const R* re = &vr[static_cast<size_t>(j) * n];
    if (wi[j] == 0 || j + 1 == n) {
      for (int i = 0; i < n; ++i) v[static_cast<size_t>(i) * n + j] = {re[i], 0};
      continue;
    }
    const R* im = &vr[static_cast<size_t>(j + 1) * n];
    for (int i = 0; i < n; ++i) {
      v[static_cast<size_t>(i) * n + j] = {re[i], im[i]};
      v[static_cast<size_t>(i) * n + j + 1] = {re[i], -im[i]};
    }
    ++j;
  }
  return "";
}

template <typename R>
std::string eig_complex(ComplexGeev<R>* geev, const std::complex<R>* a, int n, std::complex<R>* w,
                        std::complex<R>* v) {
  using C = std::complex<R>;
  std::vector<C> col, vr(v ? static_cast<size_t>(n) * n : 1);
  to_column_major(a, n, col);
  const char jobvl = 'N', jobvr = v ? 'V' : 'N';
  const int ldv = v ? n : 1, query = -1;
  int info = 0;
  C size = 0, none = 0;
  std::vector<R> rwork(2 * static_cast<size_t>(n));
  geev(&jobvl, &jobvr, &n, col.data(), &n, w, &none, &ldv, vr.data(), &ldv, &size, &query, rwork.data(), &info);
  int lwork = std::max(1, static_cast<int>(size.real()));
  std::vector<C> work(lwork);
  geev(&jobvl, &jobvr, &n, col.data(), &n, w, &none, &ldv, vr.data(), &ldv, work.data(), &lwork, rwork.data(), &info);
  if (info != 0) return not_converged(info);
  if (v == nullptr) return "";
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) v[static_cast<size_t>(i) * n + j] = vr[static_cast<size_t>(j) * n + i];
  return "";
}

// Every matrix of the batch; "" or the first failure.
template <typename In, typename R, typename F>
std::string each_matrix(const Buffer& a, const Buffer& w, const Buffer* v, F&& one) {
  const int64_t batch = a.dims[0];
  const int n = static_cast<int>(a.dims[1]);
  const auto* in = static_cast<const In*>(a.data);
  auto* values = static_cast<std::complex<R>*>(w.data);
  auto* vectors = v ? static_cast<std::complex<R>*>(v->data) : nullptr;
  if (!finite(in, batch * n * n)) return kNotFinite;
  for (int64_t b = 0; b < batch; ++b) {
    const size_t m = static_cast<size_t>(b) * n * n;
    std::string problem = one(in + m, n, values + b * n, vectors ? vectors + m : nullptr);
    if (!problem.empty()) return problem;
  }
  return "";
}

using ffi_abi::kC128;
using ffi_abi::kC64;
using ffi_abi::kF64;

std::string check(const HostCall& call, bool vectors) {
  if (call.num_args() != 1 || call.num_results() != (vectors ? 2 : 1))
    return vectors ? "takes 1 operand and 2 results (values, vectors)" : "takes 1 operand and 1 result (values)";
  const Buffer &a = call.arg(0), &w = call.result(0);
  if (a.rank != 3 || a.dims[1] != a.dims[2] || w.rank != 2 || w.dims[0] != a.dims[0] || w.dims[1] != a.dims[1])
    return "expects a [B, n, n] operand and [B, n] values";
  if (vectors) {
    const Buffer& v = call.result(1);
    if (v.rank != 3 || v.dims[0] != a.dims[0] || v.dims[1] != a.dims[1] || v.dims[2] != a.dims[1])
      return "expects [B, n, n] vectors";
  }
  const bool single = a.dtype == ffi_abi::kF32 || a.dtype == kC64;
  if (!single && a.dtype != kF64 && a.dtype != kC128) return "expects a float32, float64, complex64 or complex128 operand";
  if (w.dtype != (single ? kC64 : kC128) || (vectors && call.result(1).dtype != w.dtype))
    return "expects complex results of the operand's precision";
  return "";
}

ffi_abi::Error* handle(ffi_abi::CallFrame* frame) {
  HostCall call(frame);
  if (call.answered_metadata() || !call.executing()) return nullptr;
  const bool vectors = call.scalar_attr("vectors", 1) != 0;
  std::string problem = check(call, vectors);
  if (problem.empty()) {
    const Buffer &a = call.arg(0), &w = call.result(0);
    const Buffer* v = vectors ? &call.result(1) : nullptr;
    switch (a.dtype) {
      case ffi_abi::kF32:
        problem = each_matrix<float, float>(a, w, v, [](auto... x) {
          return eig_real<float>(routine<RealGeev<float>>("sgeev_"), x...);
        });
        break;
      case kF64:
        problem = each_matrix<double, double>(a, w, v, [](auto... x) {
          return eig_real<double>(routine<RealGeev<double>>("dgeev_"), x...);
        });
        break;
      case kC64:
        problem = each_matrix<std::complex<float>, float>(a, w, v, [](auto... x) {
          return eig_complex<float>(routine<ComplexGeev<float>>("cgeev_"), x...);
        });
        break;
      default:
        problem = each_matrix<std::complex<double>, double>(a, w, v, [](auto... x) {
          return eig_complex<double>(routine<ComplexGeev<double>>("zgeev_"), x...);
        });
        break;
    }
    if (problem.empty()) return nullptr;
    if (problem.rfind("torch.linalg.eig", 0) == 0) return call.fail(problem);
  }
  return call.fail(std::string(kEig) + ": " + problem);
}

}  // namespace

void* eig_handler() { return reinterpret_cast<void*>(&handle); }

bool eig_available() {
  return lapack("sgeev_") && lapack("dgeev_") && lapack("cgeev_") && lapack("zgeev_");
}

}  // namespace tpu::host_kernels
