#include "exec/shape_churn.h"

#include <cstdio>
#include <cstdlib>

namespace tpu::exec {

namespace {

constexpr int kDefaultLimit = 32;
constexpr size_t kRecentShown = 4;

ShapeChurn::Sink& sink_slot() {
  static ShapeChurn::Sink sink = [](const std::string& msg) { std::fprintf(stderr, "%s\n", msg.c_str()); };
  return sink;
}

int limit_from_env() {
  const char* v = std::getenv("TORCH_TPU_SHAPE_CHURN_LIMIT");
  if (v == nullptr || *v == '\0') return kDefaultLimit;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 0) ? static_cast<int>(n) : kDefaultLimit;
}

}  // namespace

ShapeChurn::ShapeChurn() : limit_(limit_from_env()) {}

void ShapeChurn::set_sink(Sink sink) { sink_slot() = std::move(sink); }

void ShapeChurn::note_compile(const std::string& group, const std::string& shapes) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (limit_ <= 0) return;
    Group& g = groups_[group];
    if (g.warned || !g.shapes.insert(shapes).second) return;
    g.recent.push_back(shapes);
    if (g.recent.size() > kRecentShown) g.recent.pop_front();
    if (static_cast<int>(g.shapes.size()) <= limit_) return;
    g.warned = true;
    message = "torch_tpu: " + group + " has been compiled for " + std::to_string(g.shapes.size()) +
              " distinct shapes (latest:";
    for (const std::string& s : g.recent) message += " (" + s + ")";
    message += "). Every new shape costs a compilation. Fix: keep shapes fixed - pad batches or "
               "sequences to a few bucket sizes. (Limit set by TORCH_TPU_SHAPE_CHURN_LIMIT.)";
  }
  sink_slot()(message);
}

}  // namespace tpu::exec
