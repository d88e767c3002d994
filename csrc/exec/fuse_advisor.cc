#include "exec/fuse_advisor.h"

#include <algorithm>

#include "common/env_flag.h"

namespace tpu::exec {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool same_world(const FuseAdvisor::Now& a, const FuseAdvisor::Now& b) {
  return a.compiles == b.compiles && a.epoch == b.epoch;
}

}  // namespace

bool FuseAdvisor::enabled_by_env() { return env_flag("TORCH_TPU_FUSE_ADVISOR", true); }

FuseAdvisor::Config& FuseAdvisor::defaults() {
  static Config config;
  return config;
}

FuseAdvisor::FuseAdvisor() : FuseAdvisor(defaults()) {}

FuseAdvisor::FuseAdvisor(Config config) : config_(config) {}

FuseAdvisor::Pattern& FuseAdvisor::pattern(uint64_t sig) {
  // Loops whose graphs keep changing (new shapes every step) make new patterns without end:
  // forget them all now and then rather than grow.
  if (patterns_.size() >= kMaxPatterns && patterns_.count(sig) == 0) {
    patterns_.clear();
    stats_.patterns_pending = 0;
  }
  touched_ = &patterns_[sig];
  return *touched_;
}

void FuseAdvisor::refresh_pending(Pattern& p) {
  const bool pending = p.verdict == Verdict::kUnknown && (p.clean > 0 || !p.fused.empty() || !p.strict.empty());
  if (pending == p.pending) return;
  p.pending = pending;
  stats_.patterns_pending += pending ? 1 : -1;
}

void FuseAdvisor::interrupt() {
  phase_ = Phase::kFollow;
  has_candidate_ = false;
}

void FuseAdvisor::begin(Phase phase, uint64_t sig, const Now& now) {
  phase_ = phase;
  window_sig_ = sig;
  window_start_ = now;
  window_iterations_ = 0;
}

void FuseAdvisor::decide(Pattern& p) {
  const int trials = config_.trials;
  if (static_cast<int>(p.fused.size()) < trials || static_cast<int>(p.strict.size()) < trials) return;
  const bool strict = median(p.strict) < (1.0 - config_.margin) * median(p.fused);
  p.verdict = strict ? Verdict::kStrict : Verdict::kFuse;
  ++stats_.patterns_timed;
  if (strict) ++stats_.patterns_strict;
}

uint64_t FuseAdvisor::last_signature(uint64_t mark) const {
  return iteration_sig_ ^ (mark * 0xff51afd7ed558ccdull);
}

uint64_t FuseAdvisor::pattern_key(uint64_t last, bool steady) {
  // Whether the iteration repeats the one before is part of the pattern: a loop reading every
  // step (its iterations alike) is another pattern than the same loop reading every few steps,
  // whose iteration after a read looks the same but follows another.
  return last * 0x9e3779b97f4a7c15ull + (steady ? 1 : 2);
}

bool FuseAdvisor::boundary(uint64_t mark, double seconds) const {
  if (!has_candidate_ || mark != candidate_) return false;
  switch (phase_) {
    case Phase::kStrictWindow:
      return true;
    case Phase::kFusedWindow:
      return window_iterations_ + 1 >= config_.min_window_iterations &&
             seconds - window_start_.seconds >= config_.min_window_seconds;
    case Phase::kStrictRun:
      return false;
    case Phase::kFollow: {
      const uint64_t last = last_signature(mark);
      if (last != previous_sig_) return false;  // only steady iterations are timed
      auto it = patterns_.find(pattern_key(last, true));
      return it != patterns_.end() && it->second.verdict == Verdict::kUnknown &&
             it->second.clean + 1 > config_.warm_iterations;
    }
  }
  return false;
}

int64_t FuseAdvisor::start(uint64_t mark, const Now& now) {
  touched_ = nullptr;
  const int64_t strict = advance(mark, now);
  if (touched_ != nullptr) refresh_pending(*touched_);
  touched_ = nullptr;
  return strict;
}

int64_t FuseAdvisor::advance(uint64_t mark, const Now& now) {
  const auto new_iteration = [&] {
    iteration_start_ = now;
    iteration_ops_ = 0;
    iteration_marks_ = 0;
    iteration_sig_ = 0;
  };
  if (!has_candidate_ || (mark != candidate_ && ++since_candidate_ > config_.max_marks)) {
    // A new candidate for the iteration's first op: nothing timed so far carries over.
    candidate_ = mark;
    has_candidate_ = true;
    since_candidate_ = 0;
    phase_ = Phase::kFollow;
    new_iteration();
    return 0;
  }
  if (mark != candidate_) {
    // A graph inside the iteration; a strict stretch that ends anywhere else than at the
    // iteration's start did not run whole iterations.
    if (phase_ == Phase::kStrictWindow || phase_ == Phase::kStrictRun) phase_ = Phase::kFollow;
    return 0;
  }
  since_candidate_ = 0;

  // An iteration ended here: a strict stretch, or a recorded (fused) iteration.
  double fused_seconds = 0;  // a recorded iteration's time
  bool steady = true;        // ... and whether it repeated the one before
  uint64_t sig = window_sig_;
  bool clean = false;
  if (phase_ == Phase::kStrictWindow) {
    Pattern& p = pattern(sig);
    if (same_world(window_start_, now)) {
      p.strict.push_back((now.seconds - window_start_.seconds) / static_cast<double>(strict_iterations_));
      decide(p);
    } else {
      ++p.dropped;  // the first one compiles the ops' own programs
    }
    phase_ = Phase::kFollow;
    clean = true;
  } else if (phase_ == Phase::kStrictRun) {
    phase_ = Phase::kFollow;  // the next iteration is recorded, to check the pattern
    new_iteration();
    return 0;
  } else {
    const uint64_t last = last_signature(mark);
    steady = last == previous_sig_;
    previous_sig_ = last;
    sig = pattern_key(last, steady);
    ops_per_iteration_ = iteration_ops_;
    marks_per_iteration_ = std::max<int64_t>(iteration_marks_, 1);
    fused_seconds = now.seconds - iteration_start_.seconds;
    clean = same_world(iteration_start_, now) && iteration_ops_ > 0;
    if (phase_ == Phase::kFusedWindow) {
      if (!clean) {
        phase_ = Phase::kFollow;
      } else if (++window_iterations_ >= config_.min_window_iterations &&
                 now.seconds - window_start_.seconds >= config_.min_window_seconds) {
        sig = window_sig_;  // the pattern timed; its strict window comes next
        pattern(sig).fused.push_back((now.seconds - window_start_.seconds) / window_iterations_);
        strict_iterations_ = window_iterations_;
        phase_ = Phase::kFollow;
      } else {
        new_iteration();
        return 0;  // the window goes on
      }
    }
  }
  new_iteration();

  Pattern& p = pattern(sig);
  if (p.verdict == Verdict::kFuse || ops_per_iteration_ <= 0) return 0;
  if (p.verdict == Verdict::kStrict) {
    begin(Phase::kStrictRun, sig, now);
    strict_iterations_ = config_.strict_iterations;
    return strict_iterations_;
  }
  if (!steady) return 0;  // an iteration between two others (after a read every few steps)
  p.clean = clean ? p.clean + 1 : 0;
  if (p.clean <= config_.warm_iterations) return 0;
  if (fused_seconds >= config_.max_iteration_seconds) {
    // A long iteration: its device time dominates, where fusing pays most; a trial would only
    // compile every op's own program.
    p.verdict = Verdict::kFuse;
    ++stats_.patterns_timed;
    return 0;
  }
  if (p.dropped > config_.trials * 2) {  // strict windows keep compiling: not a steady loop
    p.verdict = Verdict::kFuse;
    return 0;
  }
  if (p.fused.size() > p.strict.size()) {
    begin(Phase::kStrictWindow, sig, now);
    return strict_iterations_;
  }
  begin(Phase::kFusedWindow, sig, now);
  return 0;
}

}  // namespace tpu::exec
