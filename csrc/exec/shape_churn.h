// Detects shape churn: one op (or one fused graph) compiled again and again for new shapes,
// which usually means a varying batch or sequence length is forcing recompiles. After more than
// `limit` distinct shapes of one group, it warns once, naming the group and recent shapes.
//
// TORCH_TPU_SHAPE_CHURN_LIMIT=N sets the limit (default 32; 0 turns the warning off).
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace tpu::exec {

class ShapeChurn {
 public:
  ShapeChurn();
  // Records a compile of `group` (e.g. "aten::add.Tensor") for `shapes` (e.g. "[8, 3], [3]").
  void note_compile(const std::string& group, const std::string& shapes);
  void set_limit(int limit) { limit_ = limit; }
  int limit() const { return limit_; }

  // Where warnings go (the PyTorch layer turns them into Python warnings); default stderr.
  using Sink = std::function<void(const std::string&)>;
  static void set_sink(Sink sink);

 private:
  struct Group {
    std::unordered_set<std::string> shapes;
    std::deque<std::string> recent;
    bool warned = false;
  };
  std::mutex mu_;
  int limit_;
  std::unordered_map<std::string, Group> groups_;
};

}  // namespace tpu::exec
