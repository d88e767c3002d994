#include "test_support.h"

#include <cstdio>

#include "pjrt/compile_options.h"

namespace tpu::testing {

std::string cpu_plugin_path() { return TPU_TEST_PLUGIN_PATH; }

std::shared_ptr<pjrt::Plugin> cpu_plugin() {
  static std::shared_ptr<pjrt::Plugin> plugin = pjrt::Plugin::load(cpu_plugin_path());
  return plugin;
}

const pjrt::Client& cpu_client() {
  static std::unique_ptr<pjrt::Client> client = pjrt::Client::create(
      cpu_plugin(), {pjrt::NamedOption::int64("cpu_device_count", 2),
                     pjrt::NamedOption::boolean("asynchronous", true)});
  return *client;
}

std::string run_command(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = ::pclose(pipe);
  return out;
}

}  // namespace tpu::testing

namespace tpu::testing {

std::vector<HostArray> run_program(const std::string& mlir, const std::vector<HostArray>& inputs,
                                   int device) {
  const pjrt::Client& client = cpu_client();
  auto exe = client.compile(mlir, pjrt::serialize(pjrt::CompileOptions{}));
  std::vector<std::unique_ptr<pjrt::Buffer>> buffers;
  std::vector<PJRT_Buffer*> args;
  for (const HostArray& in : inputs) {
    auto t = client.buffer_from_host(in.bytes.data(), in.dtype, in.dims, device,
                                     pjrt::HostBufferSemantics::kCopyDuringCall);
    args.push_back(t.buffer->raw());
    buffers.push_back(std::move(t.buffer));
  }
  auto result = exe->execute(args, client.devices()[device].raw, {});
  std::vector<HostArray> outs;
  for (auto& b : result.outputs) {
    HostArray a;
    a.dtype = b->element_type();
    a.dims = b->dims();
    int64_t n = 1;
    for (int64_t d : a.dims) n *= d;
    a.bytes.resize(n * element_size(a.dtype));
    b->to_host(a.bytes.data(), a.bytes.size());
    outs.push_back(std::move(a));
  }
  return outs;
}

}  // namespace tpu::testing
