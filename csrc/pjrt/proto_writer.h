// A minimal protobuf wire-format writer: enough to serialize the few fields of
// xla.CompileOptionsProto that torch_tpu sets, without a protobuf library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tpu::pjrt {

class ProtoWriter {
 public:
  void int64_field(int field, int64_t value);   // int64 (negative values take 10 bytes)
  void bool_field(int field, bool value);
  void double_field(int field, double value);
  void bytes_field(int field, std::string_view value);  // also strings
  void message_field(int field, const ProtoWriter& message);

  const std::string& bytes() const { return out_; }

 private:
  void varint(uint64_t value);
  void tag(int field, int wire_type);
  std::string out_;
};

}  // namespace tpu::pjrt
