// Loading a PJRT plugin: dlopen + GetPjrtApi, API version and function-table checks,
// PJRT_Plugin_Initialize. Every failure is a PluginError naming the path, the reason and the fix.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pjrt/c_api.h"

namespace tpu::pjrt {

class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One attribute reported by PJRT_Plugin_Attributes (e.g. "xla_version").
struct PluginAttribute {
  std::string name;
  std::string string_value;            // set for string attributes
  std::vector<int64_t> int_values;     // set for int64 and int64-list attributes
};

class Plugin {
 public:
  // Loads and initialises the plugin at `path`; throws PluginError.
  static std::shared_ptr<Plugin> load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const { return major_; }
  int api_minor() const { return minor_; }
  const std::vector<PluginAttribute>& attributes() const { return attributes_; }
  // "major.minor" of the PJRT C API the plugin implements.
  std::string api_version_string() const;

  // Names of the PJRT API functions this project calls that `api` does not provide.
  static std::vector<std::string> missing_functions(const PJRT_Api* api);

  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;
  // The shared library stays loaded for the life of the process: PJRT plugins own threads
  // and static state that are not safe to unload.
  ~Plugin() = default;

 private:
  Plugin() = default;
  std::string path_;
  const PJRT_Api* api_ = nullptr;
  int major_ = 0;
  int minor_ = 0;
  std::vector<PluginAttribute> attributes_;
};

}  // namespace tpu::pjrt
