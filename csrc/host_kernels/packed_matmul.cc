#include "host_kernels/packed_matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <string>

#include "host_kernels/ffi_call_frame.h"
#include "host_kernels/parallel_for.h"

namespace tpu::host_kernels {
namespace {

constexpr int64_t P = kPackedPanel;
constexpr int kMaxRows = 12;          // rows per register block: 2 x 12 accumulators
constexpr int64_t kPrefetch = 64 * P;  // weights prefetched 64 rows (8 KB) ahead of use
constexpr int64_t kInlineWork = 1 << 18;  // multiply-adds below which one thread does it all

#if defined(__x86_64__)
// Writes `cols` (<= 32) columns of each of R rows, from two 16-wide halves per row.
template <int R>
__attribute__((target("avx512f"))) inline void store(const __m512* lo, const __m512* hi, float* y,
                                                     int64_t ldy, int64_t cols) {
  if (cols == P) {
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(y + r * ldy, lo[r]);
      _mm512_storeu_ps(y + r * ldy + 16, hi[r]);
    }
    return;
  }
  __mmask16 m_lo = cols >= 16 ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
  __mmask16 m_hi = cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m_lo, lo[r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m_hi, hi[r]);
  }
}

// R rows of x times one panel, in registers: each weight row of the panel is loaded once and
// multiplied by every row's broadcast element.
template <int R>
__attribute__((target("avx512f"))) void block_avx512(const float* x, int64_t k, const float* w, float* y,
                                                     int64_t ldy, int64_t cols) {
  __m512 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i * P + kPrefetch), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + i * P + kPrefetch + 16), _MM_HINT_T0);
    __m512 w_lo = _mm512_loadu_ps(w + i * P), w_hi = _mm512_loadu_ps(w + i * P + 16);
    for (int r = 0; r < R; ++r) {
      __m512 a = _mm512_set1_ps(x[r * k + i]);
      lo[r] = _mm512_fmadd_ps(a, w_lo, lo[r]);
      hi[r] = _mm512_fmadd_ps(a, w_hi, hi[r]);
    }
  }
  store<R>(lo, hi, y, ldy, cols);
}
#endif  // __x86_64__

// The same on a CPU without AVX-512 (the compiler vectorises the 32-wide inner loops).
template <int R>
void block_portable(const float* x, int64_t k, const float* w, float* y, int64_t ldy, int64_t cols) {
  float acc[R][P] = {};
  for (int64_t i = 0; i < k; ++i) {
    const float* wi = w + i * P;
    for (int r = 0; r < R; ++r) {
      float a = x[r * k + i];
      for (int64_t j = 0; j < P; ++j) acc[r][j] += a * wi[j];
    }
  }
  for (int r = 0; r < R; ++r) std::copy(acc[r], acc[r] + cols, y + r * ldy);
}

using Block = void (*)(const float*, int64_t, const float*, float*, int64_t, int64_t);

template <template <int> class Impl, int... R>
struct Table {
  static constexpr Block blocks[] = {nullptr, Impl<R>::fn...};
};

template <int R>
struct Portable {
  static constexpr Block fn = &block_portable<R>;
};
#if defined(__x86_64__)
template <int R>
struct Avx512 {
  static constexpr Block fn = &block_avx512<R>;
};
#endif

// The register blocks for 1..kMaxRows rows of one implementation.
template <template <int> class Impl>
using Blocks = Table<Impl, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
static_assert(sizeof(Blocks<Portable>::blocks) / sizeof(Block) == kMaxRows + 1, "one block per row count");

// This CPU's best blocks, or the portable ones.
const Block* blocks(bool portable) {
  static const Block* best = [] {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) return Blocks<Avx512>::blocks;
#endif
    return Blocks<Portable>::blocks;
  }();
  return portable ? Blocks<Portable>::blocks : best;
}

// Every row of x times panel p, in register blocks of at most 12 rows (two near-equal blocks
// rather than a full one and a sliver).
void panel(const Block* table, const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
           int64_t p) {
  const float* wp = w + p * k * P;
  int64_t cols = std::min(P, n - p * P);
  for (int64_t r0 = 0; r0 < m;) {
    int64_t left = m - r0;
    int64_t rows = left <= kMaxRows ? left : left < 2 * kMaxRows ? (left + 1) / 2 : kMaxRows;
    table[rows](x + r0 * k, k, wp, y + r0 * n + p * P, n, cols);
    r0 += rows;
  }
}

std::string check(const HostCall& call) {
  if (call.num_args() != 2 || call.num_results() != 1) return "takes 2 operands (x, w) and 1 result";
  const auto &x = call.arg(0), &w = call.arg(1), &y = call.result(0);
  if (x.dtype != ffi_abi::kF32 || w.dtype != ffi_abi::kF32 || y.dtype != ffi_abi::kF32) return "expects float32 operands";
  if (x.rank != 2 || w.rank != 3 || y.rank != 2 || w.dims[2] != P) return "expects x [M, K], w [P, K, 32], a [M, N] result";
  if (x.dims[1] != w.dims[1] || y.dims[0] != x.dims[0] || (y.dims[1] + P - 1) / P != w.dims[0])
    return "x [" + std::to_string(x.dims[0]) + ", " + std::to_string(x.dims[1]) + "] and w [" +
           std::to_string(w.dims[0]) + ", " + std::to_string(w.dims[1]) + ", 32] do not give the result's [" +
           std::to_string(y.dims[0]) + ", " + std::to_string(y.dims[1]) + "]";
  return "";
}

ffi_abi::Error* handle(ffi_abi::CallFrame* frame) {
  HostCall call(frame);
  if (call.answered_metadata() || !call.executing()) return nullptr;
  std::string problem = check(call);
  if (!problem.empty()) return call.fail(std::string(kPackedMatmul) + ": " + problem);
  const auto &x = call.arg(0), &w = call.arg(1), &y = call.result(0);
  packed_matmul(static_cast<const float*>(x.data), x.dims[0], x.dims[1], static_cast<const float*>(w.data),
                y.dims[1], static_cast<float*>(y.data));
  return nullptr;
}

}  // namespace

void packed_matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, bool portable) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(y, y + m * n, 0.0f);
    return;
  }
  // Contiguous runs of panels per task: each worker streams its own stretch of the weight. A
  // product of a few microseconds stays on the calling thread (waking a worker costs more).
  int64_t panels = (n + P - 1) / P;
  int64_t tasks = m * k * n < kInlineWork ? 1 : std::min<int64_t>(panels, 32);
  const Block* table = blocks(portable);
  parallel_for(tasks, [&](int64_t t) {
    for (int64_t p = panels * t / tasks; p < panels * (t + 1) / tasks; ++p) panel(table, x, m, k, w, n, y, p);
  });
}

void* packed_matmul_handler() { return reinterpret_cast<void*>(&handle); }

}  // namespace tpu::host_kernels
