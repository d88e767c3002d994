// Attributes of one op call (dims, keepdim, dtype, rounding mode, ...). They select the
// lowering's behaviour at build time and are part of the executable's cache key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/element_type.h"
#include "hlo/tensor_type.h"

namespace tpu::lowering {

class Attrs {
 public:
  Attrs& set_int(const char* key, int64_t v);
  Attrs& set_float(const char* key, double v);
  Attrs& set_bool(const char* key, bool v) { return set_int(key, v ? 1 : 0); }
  Attrs& set_ints(const char* key, hlo::Dims v);
  Attrs& set_dtype(const char* key, ElementType t) { return set_int(key, static_cast<int64_t>(t)); }
  Attrs& set_string(const char* key, std::string v);

  bool has(const char* key) const { return find(key) != nullptr; }
  // The getters throw std::invalid_argument naming the key when it is missing.
  int64_t get_int(const char* key) const;
  int64_t get_int(const char* key, int64_t fallback) const;
  double get_float(const char* key) const;
  bool get_bool(const char* key) const { return get_int(key) != 0; }
  bool get_bool(const char* key, bool fallback) const { return get_int(key, fallback ? 1 : 0) != 0; }
  const hlo::Dims& get_ints(const char* key) const;
  ElementType get_dtype(const char* key) const { return static_cast<ElementType>(get_int(key)); }
  const std::string& get_string(const char* key) const;

  // Appends a binary encoding of every attribute (keys included) to `key`.
  void append_to_key(std::string& key) const;

 private:
  enum class Kind : uint8_t { kInt, kFloat, kInts, kString };
  struct Entry {
    const char* key = nullptr;
    Kind kind = Kind::kInt;
    int64_t i = 0;
    double f = 0;
    hlo::Dims ints;
    std::string s;
  };
  const Entry* find(const char* key) const;
  Entry& slot(const char* key, Kind kind);
  std::vector<Entry> entries_;
};

}  // namespace tpu::lowering
