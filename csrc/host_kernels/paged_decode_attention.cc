#include "host_kernels/paged_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "host_kernels/ffi_call_frame.h"
#include "host_kernels/parallel_for.h"

namespace tpu::host_kernels {
namespace {

using ffi_abi::Buffer;

struct Shape {
  int64_t groups, heads, kv_heads, per_kv, dk, dv;
  int64_t blocks, block_size, k_width, v_width, k_offset, v_offset;
  int64_t table_width;
  bool per_query_rows;  // a 6th operand maps each query to its table row (ragged steps)
  float scale, soft_cap;
  int64_t window;
};

inline float load(float x) { return x; }
inline float load(uint16_t bf16) {  // bfloat16: the high half of a float32
  uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float load(_Float16 x) { return static_cast<float>(x); }

inline int64_t index_at(const Buffer& b, int64_t i) {
  return b.dtype == ffi_abi::kS32 ? static_cast<const int32_t*>(b.data)[i]
                                  : static_cast<const int64_t*>(b.data)[i];
}

// The table row query g reads: its own (5 operands) or the one the row operand names.
inline int64_t table_row(const Shape& s, const HostCall& call, int64_t g) {
  return s.per_query_rows ? index_at(call.arg(5), g) : g;
}

// Rows of the cache as float32: a no-op view for float32, a converted copy otherwise.
template <typename T>
inline const float* as_f32(const T* row, int64_t n, float* tmp) {
  for (int64_t i = 0; i < n; ++i) tmp[i] = load(row[i]);
  return tmp;
}
template <>
inline const float* as_f32<float>(const float* row, int64_t, float*) { return row; }

inline float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  float total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

inline void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One query's working state: its heads' pre-scaled queries, the scores of the current run of
// keys, the online softmax's running max and sum per head, and the unnormalised output.
struct Query {
  float* q;        // [heads, dk]
  float* score;    // [heads, block_size]
  float* run_max;  // [heads]
  float* run_sum;  // [heads]
  float* o;        // [heads, dv]
  float* kt;       // a converted key row (half caches)
  float* vt;       // a converted value row
};

// Folds one run of n consecutive keys (one cache block; row0: the cache row of its first
// token's kv head 0) into the query, reading each token's row of every kv head in memory order,
// with an online softmax: one rescale per query head and run. Portable code; the compiler
// vectorises it for the CPU it finds.
template <typename C>
__attribute__((target_clones("avx512f", "avx2", "default")))
void fold_run(const Shape& s, const C* k, const C* v, int64_t row0, int64_t n, const Query& w) {
  const int64_t heads = s.heads, pk = s.per_kv, bs = s.block_size;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const float* kr = as_f32(k + (row0 + t * s.kv_heads + h) * s.k_width + s.k_offset, s.dk, w.kt);
      for (int64_t j = h * pk; j < (h + 1) * pk; ++j) {
        float x = dot(w.q + j * s.dk, kr, s.dk);
        if (s.soft_cap > 0) x = s.soft_cap * std::tanh(x * s.scale / s.soft_cap);
        w.score[j * bs + t] = x;
      }
    }
  }
  for (int64_t j = 0; j < heads; ++j) {
    float* sj = w.score + j * bs;
    float m = w.run_max[j];
    for (int64_t t = 0; t < n; ++t) m = std::max(m, sj[t]);
    const float rescale = std::exp(w.run_max[j] - m);  // 0 on the first run (the max was -inf)
    if (rescale != 1.0f) {
      for (int64_t d = 0; d < s.dv; ++d) w.o[j * s.dv + d] *= rescale;
    }
    float sum = w.run_sum[j] * rescale;
    for (int64_t t = 0; t < n; ++t) {
      sj[t] = std::exp(sj[t] - m);
      sum += sj[t];
    }
    w.run_max[j] = m;
    w.run_sum[j] = sum;
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const float* vr = as_f32(v + (row0 + t * s.kv_heads + h) * s.v_width + s.v_offset, s.dv, w.vt);
      for (int64_t j = h * pk; j < (h + 1) * pk; ++j) axpy(w.score[j * bs + t], vr, w.o + j * s.dv, s.dv);
    }
  }
}

template <typename C>
using WideFold = void (*)(const Shape&, const C*, const C*, int64_t, int64_t, const Query&);

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
// GCC 12 warns inside its own reduction intrinsics (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same fold for head sizes 32, 64 or 128 on a CPU with AVX-512 (float32, bfloat16 and
// float16 caches, 16 elements converted per load): each q.k is 16-wide fused multiply-adds and
// one reduction, a run's scores are exponentiated 16 at a time, and the value rows are added 16
// wide into registers. The portable code above loses most of its time to a serial chain of
// additions per dot product, a scalar exp per score and an output row loaded and stored per token.

// e^x for x <= 0 (a score minus its running max; -inf gives 0): x = n ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor series to r^7 (relative error below 1e-8), times 2^n.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // e^-104 is below float32's smallest subnormal
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2's high bits: exact product
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 16 cache elements as float32.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {  // bfloat16: the high halves of float32s
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline __m512 load16(const _Float16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// CK = dk / 16 and CV = dv / 16 vectors per key and value row. Per query head, the query and
// the output stay in registers across the run's tokens.
template <typename C, int CK, int CV>
void fold_run_avx512(const Shape& s, const C* k, const C* v, int64_t row0, int64_t n, const Query& w) {
  const int64_t pk = s.per_kv, bs = s.block_size, heads = s.heads;
  const int64_t k_step = s.kv_heads * s.k_width, v_step = s.kv_heads * s.v_width;  // token to token
  const float soft_cap = s.soft_cap, cap_scale = s.soft_cap > 0 ? s.scale / s.soft_cap : 0.0f;
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < heads; ++j) {
    const int64_t h = j / pk;
    float* sj = w.score + j * bs;
    __m512 qv[CK];
    for (int c = 0; c < CK; ++c) qv[c] = _mm512_loadu_ps(w.q + j * 16 * CK + 16 * c);
    const C* kr = k + (row0 + h) * s.k_width + s.k_offset;
    for (int64_t t = 0; t < n; ++t, kr += k_step) {
      __m512 a0 = _mm512_mul_ps(qv[0], load16(kr));
      __m512 a1 = CK > 1 ? _mm512_mul_ps(qv[1], load16(kr + 16)) : _mm512_setzero_ps();
      for (int c = 2; c < CK; c += 2) {
        a0 = _mm512_fmadd_ps(qv[c], load16(kr + 16 * c), a0);
        if (c + 1 < CK) a1 = _mm512_fmadd_ps(qv[c + 1], load16(kr + 16 * (c + 1)), a1);
      }
      const float x = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
      sj[t] = soft_cap > 0 ? soft_cap * std::tanh(x * cap_scale) : x;
    }
    __m512 mv = _mm512_set1_ps(w.run_max[j]);
    for (int64_t t = 0; t < n; t += 16) mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(neg_inf, first_lanes(n - t), sj + t));
    const float m = _mm512_reduce_max_ps(mv);
    const float rescale = std::exp(w.run_max[j] - m);  // 0 on the first run (the max was -inf)
    const __m512 mb = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; t += 16) {
      const __mmask16 live = first_lanes(n - t);
      const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(mb, live, sj + t), mb));
      _mm512_mask_storeu_ps(sj + t, live, e);
      sum = _mm512_mask_add_ps(sum, live, sum, e);
    }
    w.run_max[j] = m;
    w.run_sum[j] = w.run_sum[j] * rescale + _mm512_reduce_add_ps(sum);
    float* oj = w.o + j * 16 * CV;
    __m512 ov[CV];
    const __m512 rv = _mm512_set1_ps(rescale);
    for (int c = 0; c < CV; ++c) ov[c] = _mm512_mul_ps(_mm512_loadu_ps(oj + 16 * c), rv);
    const C* vr = v + (row0 + h) * s.v_width + s.v_offset;
    for (int64_t t = 0; t < n; ++t, vr += v_step) {
      const __m512 p = _mm512_set1_ps(sj[t]);
      for (int c = 0; c < CV; ++c) ov[c] = _mm512_fmadd_ps(p, load16(vr + 16 * c), ov[c]);
    }
    for (int c = 0; c < CV; ++c) _mm512_storeu_ps(oj + 16 * c, ov[c]);
  }
}

// The AVX-512 fold for head sizes 32, 64 and 128 (key and value alike), or null.
template <typename C>
WideFold<C> wide_fold(int64_t dk, int64_t dv) {
  if (dk != dv) return nullptr;
  switch (dk) {
    case 32: return &fold_run_avx512<C, 2, 2>;
    case 64: return &fold_run_avx512<C, 4, 4>;
    case 128: return &fold_run_avx512<C, 8, 8>;
    default: return nullptr;
  }
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // __x86_64__

// A tile: `count` queries from g0 on that read one table row at consecutive positions (a
// prompt chunk in a ragged step; a decode is a tile of one). They take each cache block in
// turn, so a block's keys and values come from memory once per tile and from cache for the
// tile's other queries - a long prompt's queries otherwise each stream every earlier key.
constexpr int64_t kTileQueries = 8;

// The tile's queries, all heads over each one's visible keys, folded in one run of keys per
// cache block, then normalised. `fold(row0, n, query)` folds a run (fold_run or fold_run_avx512).
template <typename Fold>
void attend(const Shape& s, int64_t g0, int64_t count, const float* q_in, const Buffer& table, int64_t table_row,
            const Buffer& pos, float* out, std::vector<float>& scratch, Fold&& fold) {
  const int64_t heads = s.heads, bs = s.block_size;
  const int64_t per_query = heads * s.dk + heads * bs + heads * 2;
  scratch.resize(count * per_query + s.dk + s.dv);
  Query tile[kTileQueries];
  int64_t first[kTileQueries] = {}, last[kTileQueries] = {};  // the first `count` (>= 1) are set below
  const float qscale = s.soft_cap > 0 ? 1.0f : s.scale;
  for (int64_t i = 0; i < count; ++i) {
    Query& w = tile[i];
    w.q = scratch.data() + i * per_query;
    w.score = w.q + heads * s.dk;
    w.run_max = w.score + heads * bs;
    w.run_sum = w.run_max + heads;
    w.kt = scratch.data() + count * per_query;
    w.vt = w.kt + s.dk;
    w.o = out + (g0 + i) * heads * s.dv;
    const float* src = q_in + (g0 + i) * heads * s.dk;
    for (int64_t e = 0; e < heads * s.dk; ++e) w.q[e] = src[e] * qscale;
    std::fill(w.o, w.o + heads * s.dv, 0.0f);
    std::fill(w.run_max, w.run_max + heads, -std::numeric_limits<float>::infinity());
    std::fill(w.run_sum, w.run_sum + heads, 0.0f);
    last[i] = index_at(pos, g0 + i);
    first[i] = s.window > 0 ? std::max<int64_t>(0, last[i] - s.window + 1) : 0;
  }
  // Positions rise through the tile, so the first query sees the earliest key, the last the latest.
  for (int64_t start = first[0] - first[0] % bs; start <= last[count - 1]; start += bs) {
    const int64_t block = index_at(table, table_row * s.table_width + start / bs);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t lo = std::max(start, first[i]), hi = std::min(start + bs - 1, last[i]);
      if (lo <= hi) fold((block * bs + (lo - start)) * s.kv_heads, hi - lo + 1, tile[i]);
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const Query& w = tile[i];
    for (int64_t j = 0; j < heads; ++j) {
      const float inv = w.run_sum[j] > 0 ? 1.0f / w.run_sum[j] : 0.0f;
      for (int64_t d = 0; d < s.dv; ++d) w.o[j * s.dv + d] *= inv;
    }
  }
}

// The call's tiles: [starts[t], starts[t + 1]) (see kTileQueries).
std::vector<int64_t> tiles(const Shape& s, const HostCall& call) {
  const Buffer& pos = call.arg(4);
  std::vector<int64_t> starts;
  for (int64_t g = 0; g < s.groups; ++g) {
    const bool joins = g > 0 && g - starts.back() < kTileQueries &&
                       table_row(s, call, g) == table_row(s, call, g - 1) && index_at(pos, g) == index_at(pos, g - 1) + 1;
    if (!joins) starts.push_back(g);
  }
  starts.push_back(s.groups);
  return starts;
}

// This CPU's AVX-512 fold for the call, or null (the portable fold_run).
template <typename C>
WideFold<C> wide_path(const Shape& s) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 ? wide_fold<C>(s.dk, s.dv) : nullptr;
#else
  return nullptr;
#endif
}

template <typename C>
void run(const Shape& s, const float* q, const HostCall& call, float* out) {
  const C* kc = static_cast<const C*>(call.arg(1).data);
  const C* vc = static_cast<const C*>(call.arg(2).data);
  const Buffer &table = call.arg(3), &pos = call.arg(4);
  const auto wide = wide_path<C>(s);
  const std::vector<int64_t> starts = tiles(s, call);
  parallel_for(static_cast<int64_t>(starts.size()) - 1, [&](int64_t t) {
    thread_local std::vector<float> scratch;
    auto fold = [&](int64_t row0, int64_t n, const Query& w) {
      if (wide != nullptr) return wide(s, kc, vc, row0, n, w);
      fold_run<C>(s, kc, vc, row0, n, w);
    };
    const int64_t g0 = starts[t];
    attend(s, g0, starts[t + 1] - g0, q, table, table_row(s, call, g0), pos, out, scratch, fold);
  });
}

bool is_float(int32_t t) { return t == ffi_abi::kF32 || t == ffi_abi::kBF16 || t == ffi_abi::kF16; }
bool is_index(int32_t t) { return t == ffi_abi::kS32 || t == ffi_abi::kS64; }

std::string dims(const Buffer& b) {
  std::string r = "[";
  for (int64_t i = 0; i < b.rank; ++i) r += (i ? ", " : "") + std::to_string(b.dims[i]);
  return r + "]";
}

// The call's shape, or an error message.
std::string check(const HostCall& call, Shape& s) {
  if ((call.num_args() != 5 && call.num_args() != 6) || call.num_results() != 1) {
    return "takes 5 or 6 operands (q, k, v, table, position[, row]) and 1 result";
  }
  const Buffer &q = call.arg(0), &k = call.arg(1), &v = call.arg(2), &table = call.arg(3), &pos = call.arg(4);
  const Buffer& out = call.result(0);
  s.per_query_rows = call.num_args() == 6;
  if (q.rank != 3 || k.rank != 4 || v.rank != 4 || table.rank != 2 || pos.rank != 1 || out.rank != 3 ||
      (s.per_query_rows && call.arg(5).rank != 1)) {
    return "expects q [G, H, Dk], k and v [blocks, block_size, kv_heads, width], table [G, K] (or [R, K] with "
           "row [G]), position [G] and a [G, H, Dv] result; got q " + dims(q) + ", k " + dims(k) + ", v " +
           dims(v) + ", table " + dims(table) + ", position " + dims(pos) + ", result " + dims(out);
  }
  if (s.per_query_rows && !is_index(call.arg(5).dtype)) return "expects an int32/int64 row operand";
  if (!is_float(q.dtype) || !is_float(k.dtype) || k.dtype != v.dtype || !is_index(table.dtype) ||
      !is_index(pos.dtype) || out.dtype != ffi_abi::kF32) {
    return "expects floating q, k and v (k and v of one dtype), int32/int64 table and position and a float32 result";
  }
  s.groups = q.dims[0];
  s.heads = q.dims[1];
  s.dk = q.dims[2];
  s.dv = out.dims[2];
  s.blocks = k.dims[0];
  s.block_size = k.dims[1];
  s.kv_heads = k.dims[2];
  s.k_width = k.dims[3];
  s.v_width = v.dims[3];
  s.table_width = table.dims[1];
  s.k_offset = static_cast<int64_t>(call.scalar_attr("k_offset", 0));
  s.v_offset = static_cast<int64_t>(call.scalar_attr("v_offset", 0));
  s.scale = static_cast<float>(call.scalar_attr("scale", 1.0));
  s.soft_cap = static_cast<float>(call.scalar_attr("soft_cap", 0.0));
  s.window = static_cast<int64_t>(call.scalar_attr("window", 0));
  if (s.kv_heads <= 0 || s.heads % s.kv_heads) return "the query heads do not group over the kv heads";
  s.per_kv = s.heads / s.kv_heads;
  if (v.dims[0] != s.blocks || v.dims[1] != s.block_size || v.dims[2] != s.kv_heads) return "k and v cover different blocks";
  if ((!s.per_query_rows && table.dims[0] != s.groups) || (s.per_query_rows && call.arg(5).dims[0] != s.groups) ||
      pos.dims[0] != s.groups || out.dims[0] != s.groups || out.dims[1] != s.heads) {
    return "q, table (or row), position and the result disagree on the number of queries or heads";
  }
  if (s.k_offset < 0 || s.k_offset + s.dk > s.k_width || s.v_offset < 0 || s.v_offset + s.dv > s.v_width) {
    return "the key/value slices fall outside the cache rows";
  }
  // Every block a request reads must exist: an id past the cache would read outside it.
  for (int64_t g = 0; g < s.groups; ++g) {
    const int64_t row = table_row(s, call, g);
    if (row < 0 || row >= table.dims[0]) {
      return "query " + std::to_string(g) + " reads table row " + std::to_string(row) + " of " +
             std::to_string(table.dims[0]);
    }
    const int64_t p = index_at(pos, g);
    if (p < 0 || p >= s.table_width * s.block_size) {
      return "request " + std::to_string(g) + "'s position " + std::to_string(p) + " is outside its " +
             std::to_string(s.table_width) + " table blocks";
    }
    const int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    for (int64_t b = first / s.block_size; b <= p / s.block_size; ++b) {
      const int64_t id = index_at(table, row * s.table_width + b);
      if (id < 0 || id >= s.blocks) {
        return "request " + std::to_string(g) + " reads block " + std::to_string(id) + " of a cache with " +
               std::to_string(s.blocks) + " blocks";
      }
    }
  }
  return "";
}

ffi_abi::Error* handle(ffi_abi::CallFrame* frame) {
  HostCall call(frame);
  if (call.answered_metadata() || !call.executing()) return nullptr;
  Shape s{};
  std::string problem = check(call, s);
  if (!problem.empty()) return call.fail(std::string(kPagedDecodeAttention) + ": " + problem);
  const Buffer &qb = call.arg(0), &k = call.arg(1);
  std::vector<float> q32;
  const float* q = static_cast<const float*>(qb.data);
  if (qb.dtype != ffi_abi::kF32) {
    const int64_t n = element_count(qb);
    q32.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      q32[i] = qb.dtype == ffi_abi::kBF16 ? load(static_cast<const uint16_t*>(qb.data)[i])
                                          : load(static_cast<const _Float16*>(qb.data)[i]);
    }
    q = q32.data();
  }
  float* out = static_cast<float*>(call.result(0).data);
  switch (k.dtype) {
    case ffi_abi::kF32: run<float>(s, q, call, out); break;
    case ffi_abi::kBF16: run<uint16_t>(s, q, call, out); break;
    default: run<_Float16>(s, q, call, out); break;
  }
  return nullptr;
}

}  // namespace

void* paged_decode_attention_handler() { return reinterpret_cast<void*>(&handle); }

}  // namespace tpu::host_kernels
