#include "runtime/runtime.h"

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "host_kernels/registry.h"
#include "runtime/client_options.h"
#include "runtime/host_pages.h"

namespace tpu::runtime {

namespace {

std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}
Runtime* g_runtime = nullptr;
std::string* g_init_error = nullptr;
std::atomic<bool> g_bad_fork{false};

// A child forked after the runtime exists inherits the parent's client without its threads, and
// the first PJRT call would wait forever on a lock one of them held. CUDA's contract: the child's
// first device use raises. The init lock is taken across fork when it is free, so the child does
// not inherit it locked; it is only tried, because a plugin creating its client (under that lock)
// may itself fork a helper process.
bool g_fork_holds_init = false;
const int g_fork_handler = pthread_atfork(
    [] { g_fork_holds_init = init_mutex().try_lock(); },
    [] {
      if (g_fork_holds_init) init_mutex().unlock();
    },
    [] {
      if (g_runtime != nullptr) g_bad_fork.store(true);
      if (g_fork_holds_init) init_mutex().unlock();
    });

[[noreturn]] void throw_bad_fork() {
  throw std::runtime_error(
      "Cannot re-initialize tpu in forked subprocess; use the 'spawn' start method. This process "
      "was forked after its parent had used the tpu device, and the parent's PJRT client cannot "
      "be used from a fork. Fix: torch.multiprocessing.set_start_method('spawn') (or "
      "multiprocessing's 'forkserver'), or fork before the parent's first tpu use");
}
std::string& default_path() {
  static std::string p;
  return p;
}
struct Processes {
  int node_id = 0;
  int num_nodes = 1;
  std::shared_ptr<pjrt::KeyValueStore> store;
};
Processes& processes() {
  static Processes p;
  return p;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool is_xla_cpu_plugin(const std::string& path) {
  try {
    return plugin_kind(path, process_env()) == PluginKind::kXlaCpu;
  } catch (const std::exception&) {
    return false;  // a bad TORCH_TPU_PLATFORM is reported when the runtime is created
  }
}

// Why no default plugin was found (set by the Python package's plugin search), if it said.
std::string& plugin_search_error() {
  static std::string e;
  return e;
}

}  // namespace

void Runtime::set_plugin_search_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(init_mutex());
  plugin_search_error() = message;
}

void Runtime::set_default_plugin_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(init_mutex());
  default_path() = path;
}

std::string Runtime::default_plugin_path() {
  std::lock_guard<std::mutex> lock(init_mutex());
  return default_path();
}

std::string Runtime::configured_plugin_path() {
  if (const char* p = env("TORCH_TPU_PJRT_PLUGIN")) return p;
  return default_plugin_path();
}

bool Runtime::configured_plugin_spans_processes() { return !is_xla_cpu_plugin(configured_plugin_path()); }

void Runtime::join_processes(int node_id, int num_nodes, std::shared_ptr<pjrt::KeyValueStore> store) {
  std::lock_guard<std::mutex> lock(init_mutex());
  if (g_runtime != nullptr) {
    throw std::logic_error(
        "torch_tpu: the tpu runtime was created before the process group, so its plugin cannot "
        "join the other processes. Fix: call torch.distributed.init_process_group before the "
        "first use of a tpu device");
  }
  processes() = Processes{node_id, num_nodes, std::move(store)};
}

Runtime& Runtime::get() {
  if (g_runtime != nullptr && !g_bad_fork.load(std::memory_order_relaxed)) return *g_runtime;
  if (g_bad_fork.load()) throw_bad_fork();
  std::lock_guard<std::mutex> lock(init_mutex());
  if (g_runtime != nullptr) return *g_runtime;
  if (g_init_error != nullptr) throw std::runtime_error(*g_init_error);
  try {
    std::string path;
    if (const char* p = env("TORCH_TPU_PJRT_PLUGIN")) {
      path = p;
    } else {
      path = default_path();
      if (path.empty() && !plugin_search_error().empty()) {
        throw pjrt::PluginError(plugin_search_error());
      }
      if (path.empty()) {
        throw pjrt::PluginError(
            "torch_tpu found no PJRT plugin: the default XLA CPU plugin (package "
            "'xla-cpu-pjrt') is not installed and TORCH_TPU_PJRT_PLUGIN is not set. Fix: "
            "'pip install xla-cpu-pjrt==0.0.1', or set TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so");
      }
    }
    std::shared_ptr<pjrt::Plugin> plugin = pjrt::Plugin::load(path);
    const PluginKind kind = plugin_kind(path, process_env());
    apply_host_pages_policy(kind, process_env());
    const std::vector<pjrt::NamedOption> options = client_create_options(
        kind, process_env(), processes().node_id, processes().num_nodes);
    std::shared_ptr<pjrt::KeyValueStore> kv;
    if (kind != PluginKind::kXlaCpu && processes().num_nodes > 1) kv = processes().store;
    std::unique_ptr<pjrt::Client> client;
    try {
      client = pjrt::Client::create(plugin, options, kv);
    } catch (const std::exception& e) {
      throw pjrt::PluginError("torch_tpu loaded the PJRT plugin '" + path +
                              "' but could not create its client: " + e.what() +
                              ". Fix: check that the plugin's device is present and usable "
                              "(drivers, permissions), or select another plugin with "
                              "TORCH_TPU_PJRT_PLUGIN");
    }
    auto* rt = new Runtime();
    rt->client_ = std::move(client);
    for (size_t i = 0; i < rt->client_->devices().size(); ++i) {
      rt->trackers_.push_back(std::make_unique<WorkTracker>(static_cast<int>(i)));
    }
    rt->device_memory_is_host_ = kind == PluginKind::kXlaCpu;
    if (kind == PluginKind::kXlaCpu) {
      try {
        rt->host_kernels_ = host_kernels::register_all(plugin->api(), "Host");
      } catch (const std::exception& e) {
        // The portable formulations still run; only the faster host kernels are missing.
        std::fprintf(stderr, "torch_tpu: warning: the host kernels were not registered with the CPU plugin (%s); "
                     "using the portable formulations\n", e.what());
      }
    }
    rt->identity_ = rt->client_->platform_name() + " " + rt->client_->platform_version() +
                    " (PJRT " + plugin->api_version_string() + ")";
    g_runtime = rt;
  } catch (const std::exception& e) {
    g_init_error = new std::string(e.what());
    throw;
  }
  return *g_runtime;
}

int Runtime::device_count_or_zero() noexcept {
  try {
    return get().device_count();
  } catch (...) {
    return 0;
  }
}

bool Runtime::created() noexcept { return g_runtime != nullptr; }

bool Runtime::in_bad_fork() noexcept { return g_bad_fork.load(); }

const pjrt::DeviceInfo& Runtime::device(int index) const {
  check_device_index(index);
  return client_->devices()[index];
}

WorkTracker& Runtime::tracker(int device) {
  check_device_index(device);
  return *trackers_[device];
}

void check_device_index(int index) {
  const int n = Runtime::get().device_count();
  if (index < 0 || index >= n) {
    std::string fix =
        "Fix: use a valid index (the XLA CPU plugin's device count is set by "
        "TORCH_TPU_CPU_DEVICE_COUNT before torch_tpu is first used)";
    if (env("LOCAL_RANK") != nullptr && n == 1) {
      fix = "Fix: each process of this launch owns one tpu device: call "
            "torch.tpu.set_device(LOCAL_RANK) (it selects that device) and use device 'tpu' "
            "(or torch.tpu.current_device()) instead of 'tpu:<LOCAL_RANK>'";
    }
    throw std::out_of_range("tpu device index " + std::to_string(index) +
                            " is out of range: this process has " + std::to_string(n) +
                            " tpu device(s), valid indices are 0.." + std::to_string(n - 1) + ". " +
                            fix);
  }
}

}  // namespace tpu::runtime
