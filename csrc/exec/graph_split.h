// Splitting a recorded Fused Eager graph at a host read: when the host needs one value of the
// graph (`loss.item()` after backward and the optimizer step), the graph runs as two programs -
// (a) the read value's dependency closure and (b) the rest - launched back to back, so the read
// waits only for (a) while (b) runs as the host records the next step.
//
// The split is a pure function of the graph's structure and the read value, so every iteration
// of a loop splits at the same point and hits the same two cached programs.
//
//   TORCH_TPU_FUSE_SPLIT_READS=1|0  - split or not (read at each such flush; default 1). On
//                                     the XLA CPU plugin the rest competes with the recording
//                                     for the same cores: on 2 cores it gains 6-10% at the main
//                                     Llama size and costs 3-10% at the reference size
//                                     (benchmarks/fused_vs_strict.py); on by default for all.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "common/inline_vector.h"

namespace tpu::exec {

// The values one recorded op reads or produces (inline: an op has few).
using NodeValues = common::InlineVector<int, 6>;

// A part of a recorded graph that runs as one program. Value ids are the graph's.
struct GraphPart {
  std::vector<int> nodes;    // node indices, in record order
  std::vector<int> inputs;   // values taken as program parameters, in this order
  std::vector<int> outputs;  // values returned, in this order
  std::vector<int> aliases;  // per output: the index in `inputs` whose buffer it may take, or -1
};

// The graph as the split sees it.
struct GraphShape {
  size_t num_values = 0;
  std::vector<const NodeValues*> reads;   // per node: the values it reads
  std::vector<const NodeValues*> writes;  // per node: the values it produces
  std::vector<int> params;   // the value of each graph parameter, in parameter order
  std::vector<int> outputs;  // the whole graph's outputs, ascending
  std::vector<int> aliases;  // per output: the graph parameter whose buffer it may take, or -1
};

struct GraphSplit {
  GraphPart first;  // the read value's dependencies
  GraphPart rest;   // everything else; may read `first`'s outputs
};

// The split for a read of `read_value`, or nullopt when the rest would be empty or have fewer than
// `min_rest` nodes (too little to overlap with anything).
//
// Donation: `first` lets an output take a parameter's buffer only when `rest` does not read that
// parameter; `rest` may alias a parameter `first` also reads (the run-time donation check,
// exec/captured_program.h, refuses a buffer an unfinished launch still holds).
std::optional<GraphSplit> split_for_read(const GraphShape& graph, int read_value, size_t min_rest);

// Whether to split: false only when TORCH_TPU_FUSE_SPLIT_READS is "0" (read at each call).
bool split_reads_enabled();

}  // namespace tpu::exec
