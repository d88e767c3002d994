#include "lowering/attrs.h"

#include <cstring>
#include <stdexcept>

namespace tpu::lowering {

const Attrs::Entry* Attrs::find(const char* key) const {
  for (const Entry& e : entries_) {
    if (std::strcmp(e.key, key) == 0) return &e;
  }
  return nullptr;
}

Attrs::Entry& Attrs::slot(const char* key, Kind kind) {
  for (Entry& e : entries_) {
    if (std::strcmp(e.key, key) == 0) {
      e.kind = kind;
      return e;
    }
  }
  Entry e;
  e.key = key;
  e.kind = kind;
  if (entries_.empty()) entries_.reserve(4);  // one allocation for an op's few attributes
  entries_.push_back(std::move(e));
  return entries_.back();
}

Attrs& Attrs::set_int(const char* key, int64_t v) { slot(key, Kind::kInt).i = v; return *this; }
Attrs& Attrs::set_float(const char* key, double v) { slot(key, Kind::kFloat).f = v; return *this; }
Attrs& Attrs::set_ints(const char* key, hlo::Dims v) { slot(key, Kind::kInts).ints = std::move(v); return *this; }
Attrs& Attrs::set_string(const char* key, std::string v) { slot(key, Kind::kString).s = std::move(v); return *this; }

namespace {
[[noreturn]] void missing(const char* key) {
  throw std::invalid_argument(std::string("lowering attribute '") + key + "' is missing");
}
}  // namespace

int64_t Attrs::get_int(const char* key) const {
  const Entry* e = find(key);
  if (e == nullptr) missing(key);
  return e->i;
}
int64_t Attrs::get_int(const char* key, int64_t fallback) const {
  const Entry* e = find(key);
  return e == nullptr ? fallback : e->i;
}
double Attrs::get_float(const char* key) const {
  const Entry* e = find(key);
  if (e == nullptr) missing(key);
  return e->f;
}
const hlo::Dims& Attrs::get_ints(const char* key) const {
  const Entry* e = find(key);
  if (e == nullptr) missing(key);
  return e->ints;
}
const std::string& Attrs::get_string(const char* key) const {
  const Entry* e = find(key);
  if (e == nullptr) missing(key);
  return e->s;
}

void Attrs::append_to_key(std::string& key) const {
  for (const Entry& e : entries_) {
    key.append(e.key);
    key.push_back('\0');
    key.push_back(static_cast<char>(e.kind));
    switch (e.kind) {
      case Kind::kInt: key.append(reinterpret_cast<const char*>(&e.i), sizeof(e.i)); break;
      case Kind::kFloat: key.append(reinterpret_cast<const char*>(&e.f), sizeof(e.f)); break;
      case Kind::kInts: {
        const int64_t n = static_cast<int64_t>(e.ints.size());
        key.append(reinterpret_cast<const char*>(&n), sizeof(n));
        key.append(reinterpret_cast<const char*>(e.ints.data()), e.ints.size() * sizeof(int64_t));
        break;
      }
      case Kind::kString: key.append(e.s); key.push_back('\0'); break;
    }
  }
}

}  // namespace tpu::lowering
