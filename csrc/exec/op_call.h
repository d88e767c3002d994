// One op invocation as the executors see it: which lowering, its attributes, its inputs
// (strided views of device storages, or host scalars) and where each output goes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/element_type.h"
#include "hlo/tensor_type.h"
#include "lowering/attrs.h"
#include "runtime/device_storage.h"

namespace tpu::exec {

class ReplicaGroup;

// A strided view of a storage, in elements of `dtype` (PyTorch's sizes/strides/storage_offset).
struct View {
  ElementType dtype = ElementType::kF32;
  hlo::Dims sizes;
  hlo::Dims strides;
  int64_t offset = 0;
  int64_t numel() const;
};

// A host scalar (a Python number, an alpha, an RNG seed) passed to the program at run time.
struct ScalarValue {
  ElementType dtype = ElementType::kF32;
  double f = 0;       // used when dtype is floating
  int64_t i = 0;      // used otherwise (bool: 0/1; uint64: bit pattern)
  // Values that change on every call (RNG offsets) bypass the device scalar cache.
  bool cacheable = true;

  static ScalarValue floating(ElementType t, double v) { ScalarValue s; s.dtype = t; s.f = v; return s; }
  static ScalarValue integral(ElementType t, int64_t v) { ScalarValue s; s.dtype = t; s.i = v; return s; }
  // The dtype's little-endian bytes of this value.
  std::string bytes() const;
};

struct Input {
  enum class Kind { kTensor, kScalar };
  Kind kind = Kind::kTensor;
  // kTensor
  runtime::DeviceStorage* storage = nullptr;
  View view;
  ElementType compute = ElementType::kF32;  // the lowering sees the view converted to this
  // kScalar (the lowering sees a rank-0 value of scalar.dtype)
  ScalarValue scalar;

  static Input tensor(runtime::DeviceStorage* s, View v, ElementType compute) {
    Input in; in.kind = Kind::kTensor; in.storage = s; in.view = std::move(v); in.compute = compute; return in;
  }
  static Input of_scalar(ScalarValue v) { Input in; in.kind = Kind::kScalar; in.scalar = v; return in; }
};

// An existing tensor that receives an output (in-place ops, copies into views). The output is
// converted to the view's dtype and must already have the view's shape.
struct Target {
  runtime::DeviceStorage* storage = nullptr;
  View view;
};

struct OpCall {
  std::string op;                      // lowering name in the registry
  const char* label = "";              // what error messages call it, e.g. "aten::add_.Tensor"
  lowering::Attrs attrs;
  std::vector<Input> inputs;
  // One entry per lowering output: nullopt for a fresh output, or where to write it.
  std::vector<std::optional<Target>> outputs;
  int device = 0;
  // Collective programs only: the group whose devices run the program together (the caller
  // keeps it alive during the call; see exec/replica_group.h).
  const ReplicaGroup* group = nullptr;
};

}  // namespace tpu::exec
