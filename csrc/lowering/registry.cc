#include "lowering/registry.h"

#include <stdexcept>
#include <unordered_map>

namespace tpu::lowering {

namespace {
std::unordered_map<std::string, LowerFn>& table() {
  static auto* t = new std::unordered_map<std::string, LowerFn>();
  return *t;
}
}  // namespace

void register_lowering(const char* name, LowerFn fn) {
  auto [it, inserted] = table().emplace(name, std::move(fn));
  if (!inserted) throw std::logic_error(std::string("lowering registered twice: ") + name);
}

bool register_lowerings(const LoweringEntry* entries, size_t count) {
  for (size_t i = 0; i < count; ++i) register_lowering(entries[i].name, entries[i].fn);
  return true;
}

const LowerFn* find_lowering(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> registered_lowerings() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) names.push_back(name);
  return names;
}

}  // namespace tpu::lowering
