// Shared fixtures for the C++ tests: the default XLA CPU plugin and a client on it.
#pragma once

#include <cstring>
#include <memory>
#include <string>

#include "pjrt/client.h"
#include "pjrt/plugin.h"

namespace tpu::testing {

// Path of the XLA CPU plugin (set by CMake from the installed xla-cpu-pjrt package).
std::string cpu_plugin_path();
// One plugin and one two-device client shared by all tests of the process.
std::shared_ptr<pjrt::Plugin> cpu_plugin();
const pjrt::Client& cpu_client();
// Runs a shell command and returns its stdout; sets *status to its exit status.
std::string run_command(const std::string& command, int* status);

}  // namespace tpu::testing

#include <vector>

#include "common/element_type.h"
#include "hlo/tensor_type.h"

namespace tpu::testing {

// A dense host array for feeding programs and reading results.
struct HostArray {
  ElementType dtype = ElementType::kF32;
  hlo::Dims dims;
  std::string bytes;

  template <typename T>
  static HostArray of(ElementType t, hlo::Dims d, const std::vector<T>& values) {
    HostArray a{t, std::move(d), std::string(values.size() * sizeof(T), '\0')};
    std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
    return a;
  }
  template <typename T>
  std::vector<T> values() const {
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
};

// A StableHLO program adding two f32[4] vectors: the smallest real executable.
inline constexpr const char* kAddProgram = R"(
module @m {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
})";

// Compiles `mlir` on the shared client, runs it on `device` with `inputs`, returns the outputs.
std::vector<HostArray> run_program(const std::string& mlir, const std::vector<HostArray>& inputs,
                                   int device = 0);

}  // namespace tpu::testing
