// Drops known false alarms that a PJRT plugin writes to the process's stderr during one call.
//
// The XLA CPU plugin (openxla/xla, xla/service/cpu/cpu_aot_loader.cc) checks every loaded
// executable's recorded target features against llvm::sys::getHostCPUFeatures() and logs an
// ERROR per "+feature" the host list lacks. On any AVX-512 host XLA adds the LLVM *tuning*
// flags +prefer-no-gather and +prefer-no-scatter to the target features (and adds them again
// when it reads them back), and host detection never reports tuning flags - so every load prints
// two ~3 kB "E0000 ... cpu_aot_loader" lines on the very machine that compiled it
// (openxla/xla#44565). The plugin offers no option to avoid it short of compiling without
// AVX-512, and its logging is not reachable from outside (absl inside the plugin, no exported
// symbols). So the disk cache's loads run under this filter, which drops exactly those lines
// (a real instruction-set mismatch is still printed - and is kept from happening by the disk
// tier's machine record, cache/host_cpu.h).
#pragma once

#include <mutex>
#include <string>
#include <string_view>

namespace tpu::pjrt {

using LineFilter = bool (*)(std::string_view line);  // true: drop the line

// While alive, the process's stderr (fd 2) goes to a private in-memory file; the destructor
// restores it and writes back every captured line `drop` keeps. One at a time per process.
// Output of other threads in that window is delayed, not lost. If setting up the capture fails,
// stderr is left alone.
class StderrFilter {
 public:
  explicit StderrFilter(LineFilter drop);
  ~StderrFilter();
  StderrFilter(const StderrFilter&) = delete;
  StderrFilter& operator=(const StderrFilter&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
  LineFilter drop_;
  int saved_ = -1;    // the real stderr
  int capture_ = -1;  // the in-memory file standing in for it
};

// `text` without the lines `drop` selects. absl's one-time preface ("WARNING: All log messages
// before absl::InitializeLog() ...") goes with the dropped line that directly follows it.
std::string filter_lines(std::string_view text, LineFilter drop);

// The XLA CPU loader's false alarm about the tuning-only features +prefer-no-gather /
// +prefer-no-scatter (see above); its reports about any other feature are kept.
bool is_tuning_feature_false_alarm(std::string_view line);

}  // namespace tpu::pjrt
