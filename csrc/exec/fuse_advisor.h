// Fused Eager's check that fusing pays: a model whose steps run faster op by op (Strict) than
// recorded and run as graphs stops being fused, by itself.
//
// The unit is the *iteration*: the ops from one graph start at the iteration's first op to the
// next graph start at the same op (a loop's step, whatever cuts its graphs: a repeat, host
// reads). An iteration pattern is that first op (its mark), the fingerprints of the graphs the
// iteration ran and whether it repeated the iteration before. Only repeating (steady) iterations
// are timed; the same loop with another read pattern is another pattern. Once a
// pattern's graphs are compiled, the advisor times windows of whole iterations fused and then run
// strictly (the graph's owner runs the next k iterations in Strict mode, counting them by the ops
// that look like the iteration's first), in turns, and compares the medians:
//   - strict faster by more than the margin: the pattern runs strictly from then on, in long
//     stretches, with one fused iteration between them that checks the pattern is still the same;
//   - otherwise it is fused as before, and the advisor only follows the iterations.
// Windows begin and end with the device idle (the caller waits at boundary()); a window in which
// anything compiled or the eager mode changed is dropped. Pure logic: the
// caller (exec/fused_graph.h) passes the clock and counters and holds its lock.
//
//   TORCH_TPU_FUSE_ADVISOR=0 - always fuse (no timing)
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace tpu::exec {

struct FuseAdvisorStats {
  int64_t patterns_timed = 0;   // iteration patterns given a verdict
  int64_t patterns_strict = 0;  // ... that run strictly (Strict was faster)
  // Steady patterns on their way to a verdict: clean iterations counted or windows timed (a
  // gauge; a loop that stops before its verdict leaves its pattern here).
  int64_t patterns_pending = 0;
};

class FuseAdvisor {
 public:
  struct Config {
    int warm_iterations = 3;      // clean iterations (nothing compiled) before timing
    int min_window_iterations = 2;
    double min_window_seconds = 0.01;
    int trials = 3;               // fused and strict windows per pattern
    double margin = 0.10;         // strict must take under (1 - margin) of fused's time
    int strict_iterations = 50;   // a verdict-strict stretch, between two checking iterations
    int max_marks = 64;           // graph starts without the candidate recurring: pick another
    double max_iteration_seconds = 0.05;  // longer iterations are fused without a trial
  };
  // What the world looked like at a graph start.
  struct Now {
    double seconds = 0;
    int64_t compiles = 0;  // programs compiled or loaded so far (any cache)
    uint64_t epoch = 0;    // changes of the eager mode so far
  };

  FuseAdvisor();
  explicit FuseAdvisor(Config config);
  // The configuration new advisors take (tests change it).
  static Config& defaults();

  // Whether a graph start at an op with mark `mark` at `seconds` begins or ends a timed window:
  // the caller then waits for the device before it takes the time for start(), so a window
  // counts the device work of its iterations, not how far the launches ran ahead.
  bool boundary(uint64_t mark, double seconds) const;
  // A graph starts (not the continuation of a size-cut one) at an op with mark `mark`. Returns
  // how many iterations, from this op on, to run strictly (0: record it). The caller counts
  // them by the ops with the candidate's mark (marks_per_iteration() of them per iteration).
  int64_t start(uint64_t mark, const Now& now);
  // One op recorded into a graph; `candidate`: it has the candidate's mark.
  void recorded(bool candidate) {
    ++iteration_ops_;
    iteration_marks_ += candidate;
  }
  // Per recorded iteration: its ops, and its ops with the candidate's mark (the first among them).
  int64_t ops_per_iteration() const { return ops_per_iteration_; }
  int64_t marks_per_iteration() const { return marks_per_iteration_; }
  // A graph of the current iteration ran, with fingerprint word `fp`.
  void flushed(uint64_t fp) { iteration_sig_ = iteration_sig_ * 0x9e3779b97f4a7c15ull + fp + 1; }
  // Whatever is being timed is dropped (a mode change, a capture, a collective).
  void interrupt();

  const FuseAdvisorStats& stats() const { return stats_; }
  // The mark of the op taken for an iteration's first (meaningful after a start).
  uint64_t candidate() const { return candidate_; }

  // Whether the advisor runs at all (TORCH_TPU_FUSE_ADVISOR).
  static bool enabled_by_env();

 private:
  enum class Verdict { kUnknown, kFuse, kStrict };
  struct Pattern {
    Verdict verdict = Verdict::kUnknown;
    int clean = 0;                  // clean fused iterations seen
    int dropped = 0;                // strict windows in which something compiled
    std::vector<double> fused, strict;  // seconds per iteration, per window
    bool pending = false;               // counted in patterns_pending
  };
  enum class Phase { kFollow, kFusedWindow, kStrictWindow, kStrictRun };
  static constexpr size_t kMaxPatterns = 4096;

  // The pattern of `sig` (made if new); start() refreshes its pending state when it returns.
  Pattern& pattern(uint64_t sig);
  int64_t advance(uint64_t mark, const Now& now);  // start() but for that refresh
  void refresh_pending(Pattern& p);
  // The fingerprint of the iteration ending at a start of `mark`, and the key of its pattern.
  uint64_t last_signature(uint64_t mark) const;
  static uint64_t pattern_key(uint64_t last, bool steady);
  void begin(Phase phase, uint64_t sig, const Now& now);
  void decide(Pattern& p);

  Config config_;
  FuseAdvisorStats stats_;
  std::unordered_map<uint64_t, Pattern> patterns_;
  Pattern* touched_ = nullptr;  // the pattern the start() in progress looked up
  // The candidate first op of an iteration, and how many graph starts since it was seen.
  uint64_t candidate_ = 0;
  bool has_candidate_ = false;
  int since_candidate_ = 0;
  // The iteration in progress (from the candidate's last start).
  int64_t iteration_ops_ = 0;
  int64_t iteration_marks_ = 0;
  uint64_t iteration_sig_ = 0;
  uint64_t previous_sig_ = 0;  // the iteration before's
  Now iteration_start_;
  int64_t ops_per_iteration_ = 0;
  int64_t marks_per_iteration_ = 1;
  // The window in progress.
  Phase phase_ = Phase::kFollow;
  uint64_t window_sig_ = 0;
  Now window_start_;
  int window_iterations_ = 0;
  int64_t strict_iterations_ = 0;  // iterations the strict window or run stands for
};

}  // namespace tpu::exec
