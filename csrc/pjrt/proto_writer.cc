#include "pjrt/proto_writer.h"

#include <cstring>

namespace tpu::pjrt {

namespace {
constexpr int kWireVarint = 0;
constexpr int kWireFixed64 = 1;
constexpr int kWireLengthDelimited = 2;
}  // namespace

void ProtoWriter::varint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void ProtoWriter::tag(int field, int wire_type) {
  varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void ProtoWriter::int64_field(int field, int64_t value) {
  tag(field, kWireVarint);
  varint(static_cast<uint64_t>(value));
}

void ProtoWriter::bool_field(int field, bool value) {
  tag(field, kWireVarint);
  varint(value ? 1 : 0);
}

void ProtoWriter::double_field(int field, double value) {
  tag(field, kWireFixed64);
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void ProtoWriter::bytes_field(int field, std::string_view value) {
  tag(field, kWireLengthDelimited);
  varint(value.size());
  out_.append(value.data(), value.size());
}

void ProtoWriter::message_field(int field, const ProtoWriter& message) {
  bytes_field(field, message.bytes());
}

}  // namespace tpu::pjrt
