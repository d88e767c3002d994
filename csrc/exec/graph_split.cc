#include "exec/graph_split.h"

#include <cstdlib>
#include <cstring>

namespace tpu::exec {

bool split_reads_enabled() {
  const char* v = std::getenv("TORCH_TPU_FUSE_SPLIT_READS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::optional<GraphSplit> split_for_read(const GraphShape& graph, int read_value, size_t min_rest) {
  const size_t n = graph.reads.size();
  if (read_value < 0 || static_cast<size_t>(read_value) >= graph.num_values) return std::nullopt;
  std::vector<int> producer(graph.num_values, -1);
  for (size_t j = 0; j < n; ++j) {
    for (int v : *graph.writes[j]) producer[v] = static_cast<int>(j);
  }
  if (producer[read_value] < 0) return std::nullopt;  // a parameter: nothing to compute

  // The dependency closure of the read value.
  std::vector<bool> in_first(n, false);
  std::vector<int> stack{producer[read_value]};
  in_first[producer[read_value]] = true;
  size_t first_count = 1;
  while (!stack.empty()) {
    const int j = stack.back();
    stack.pop_back();
    for (int v : *graph.reads[j]) {
      const int p = producer[v];
      if (p >= 0 && !in_first[p]) {
        in_first[p] = true;
        ++first_count;
        stack.push_back(p);
      }
    }
  }
  if (first_count == n || n - first_count < min_rest) return std::nullopt;

  std::vector<bool> read_by_first(graph.num_values, false), read_by_rest(graph.num_values, false);
  GraphSplit split;
  for (size_t j = 0; j < n; ++j) {
    (in_first[j] ? split.first.nodes : split.rest.nodes).push_back(static_cast<int>(j));
    for (int v : *graph.reads[j]) (in_first[j] ? read_by_first : read_by_rest)[v] = true;
  }
  const auto produced_by_first = [&](int v) { return producer[v] >= 0 && in_first[producer[v]]; };

  // Parameters, in graph order; remember each one's index in each part.
  std::vector<int> first_input_of(graph.params.size(), -1), rest_input_of(graph.params.size(), -1);
  for (size_t p = 0; p < graph.params.size(); ++p) {
    const int v = graph.params[p];
    if (read_by_first[v]) {
      first_input_of[p] = static_cast<int>(split.first.inputs.size());
      split.first.inputs.push_back(v);
    }
    if (read_by_rest[v]) {
      rest_input_of[p] = static_cast<int>(split.rest.inputs.size());
      split.rest.inputs.push_back(v);
    }
  }
  std::vector<int> alias_of(graph.num_values, -1);  // per output value: graph parameter or -1
  std::vector<bool> is_output(graph.num_values, false);
  for (size_t k = 0; k < graph.outputs.size(); ++k) {
    is_output[graph.outputs[k]] = true;
    alias_of[graph.outputs[k]] = graph.aliases[k];
  }
  // First's outputs: the graph's outputs it computes and the values the rest reads from it, in
  // value order; the latter are also the rest's inputs after its parameters.
  for (size_t v = 0; v < graph.num_values; ++v) {
    const int value = static_cast<int>(v);
    if (!produced_by_first(value) || !(is_output[v] || read_by_rest[v])) continue;
    int alias = -1;
    if (is_output[v] && alias_of[v] >= 0 && first_input_of[alias_of[v]] >= 0 &&
        rest_input_of[alias_of[v]] < 0) {
      alias = first_input_of[alias_of[v]];
    }
    split.first.outputs.push_back(value);
    split.first.aliases.push_back(alias);
    if (read_by_rest[v]) split.rest.inputs.push_back(value);
  }
  for (int v : graph.outputs) {
    if (produced_by_first(v)) continue;
    const int p = alias_of[v];
    split.rest.outputs.push_back(v);
    split.rest.aliases.push_back(p >= 0 ? rest_input_of[p] : -1);
  }
  return split;
}

}  // namespace tpu::exec
