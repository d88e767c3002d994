#include "pjrt/key_value_store.h"

#include <cstddef>
#include <cstring>
#include <exception>

namespace tpu::pjrt {

namespace {

char* copy_of(const std::string& s) {
  char* out = new char[s.size() + 1];
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

void delete_value(char* value) { delete[] value; }

PJRT_Error* report(PJRT_CallbackError* callback_error, PJRT_Error_Code code, const std::string& message) {
  return (*callback_error)(code, message.data(), message.size());
}

PJRT_Error* kv_get(PJRT_KeyValueGetCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  try {
    const std::string value = store->get(std::string(args->key, args->key_size),
                                         std::chrono::milliseconds(args->timeout_in_ms));
    args->value = copy_of(value);
    args->value_size = value.size();
    args->value_deleter_callback = &delete_value;
    return nullptr;
  } catch (const std::exception& e) {
    return report(args->callback_error, PJRT_Error_Code_DEADLINE_EXCEEDED, e.what());
  }
}

PJRT_Error* kv_try_get(PJRT_KeyValueTryGetCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  try {
    const std::optional<std::string> value = store->try_get(std::string(args->key, args->key_size));
    if (!value) {
      return report(args->callback_error, PJRT_Error_Code_NOT_FOUND,
                    "key '" + std::string(args->key, args->key_size) + "' not found");
    }
    args->value = copy_of(*value);
    args->value_size = value->size();
    args->value_deleter_callback = &delete_value;
    return nullptr;
  } catch (const std::exception& e) {
    return report(args->callback_error, PJRT_Error_Code_UNAVAILABLE, e.what());
  }
}

PJRT_Error* kv_put(PJRT_KeyValuePutCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  try {
    store->put(std::string(args->key, args->key_size), std::string(args->value, args->value_size));
    return nullptr;
  } catch (const std::exception& e) {
    return report(args->callback_error, PJRT_Error_Code_UNAVAILABLE, e.what());
  }
}

}  // namespace

void connect_key_value_store(PJRT_Client_Create_Args& args, KeyValueStore* store) {
  if (store == nullptr) return;
  args.kv_get_callback = &kv_get;
  args.kv_get_user_arg = store;
  args.kv_put_callback = &kv_put;
  args.kv_put_user_arg = store;
  // Older headers end before kv_try_get: set it only when the struct has the field.
  if (args.struct_size >= offsetof(PJRT_Client_Create_Args, kv_try_get_user_arg) + sizeof(void*)) {
    args.kv_try_get_callback = &kv_try_get;
    args.kv_try_get_user_arg = store;
  }
}

}  // namespace tpu::pjrt
