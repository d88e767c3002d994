// The PJRT key-value callbacks a plugin calls at client creation, driven as a plugin drives
// them: values put by one side are got by the other, missing keys and store failures come back
// as PJRT errors carrying their message.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "pjrt/key_value_store.h"

namespace tpu {
namespace {

class MapStore : public pjrt::KeyValueStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    last_timeout = timeout;
    auto it = values.find(key);
    if (it == values.end()) throw std::runtime_error("no '" + key + "' after the timeout");
    return it->second;
  }
  std::optional<std::string> try_get(const std::string& key) override {
    auto it = values.find(key);
    return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  void put(const std::string& key, const std::string& value) override { values[key] = value; }
  std::map<std::string, std::string> values;
  std::chrono::milliseconds last_timeout{0};
};

// What the plugin's error factory received.
PJRT_Error_Code g_code;
std::string g_message;
PJRT_Error* g_error = reinterpret_cast<PJRT_Error*>(0x1);
PJRT_Error* record_error(PJRT_Error_Code code, const char* message, size_t size) {
  g_code = code;
  g_message.assign(message, size);
  return g_error;
}
PJRT_CallbackError g_callback_error = &record_error;

TEST(KeyValueStore, PutThenGetThroughTheCallbacks) {
  MapStore store;
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  pjrt::connect_key_value_store(create, &store);
  ASSERT_NE(create.kv_put_callback, nullptr);
  ASSERT_NE(create.kv_get_callback, nullptr);

  const std::string value("nccl\0id", 7);  // binary values keep their bytes
  PJRT_KeyValuePutCallback_Args put{};
  put.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  put.key = "node/0";
  put.key_size = 6;
  put.value = value.data();
  put.value_size = value.size();
  put.callback_error = &g_callback_error;
  put.user_arg = create.kv_put_user_arg;
  EXPECT_EQ(create.kv_put_callback(&put), nullptr);
  EXPECT_EQ(store.values["node/0"], value);

  PJRT_KeyValueGetCallback_Args get{};
  get.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  get.key = "node/0";
  get.key_size = 6;
  get.timeout_in_ms = 2500;
  get.callback_error = &g_callback_error;
  get.user_arg = create.kv_get_user_arg;
  ASSERT_EQ(create.kv_get_callback(&get), nullptr);
  EXPECT_EQ(std::string(get.value, get.value_size), value);
  EXPECT_EQ(store.last_timeout.count(), 2500);
  ASSERT_NE(get.value_deleter_callback, nullptr);
  get.value_deleter_callback(get.value);
}

TEST(KeyValueStore, MissingKeysAreErrorsWithTheStoresMessage) {
  MapStore store;
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  pjrt::connect_key_value_store(create, &store);

  PJRT_KeyValueGetCallback_Args get{};
  get.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  get.key = "absent";
  get.key_size = 6;
  get.timeout_in_ms = 10;
  get.callback_error = &g_callback_error;
  get.user_arg = create.kv_get_user_arg;
  EXPECT_EQ(create.kv_get_callback(&get), g_error);
  EXPECT_EQ(g_code, PJRT_Error_Code_DEADLINE_EXCEEDED);
  EXPECT_NE(g_message.find("no 'absent'"), std::string::npos) << g_message;

  PJRT_KeyValueTryGetCallback_Args try_get{};
  try_get.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  try_get.key = "absent";
  try_get.key_size = 6;
  try_get.callback_error = &g_callback_error;
  try_get.user_arg = create.kv_try_get_user_arg;
  EXPECT_EQ(create.kv_try_get_callback(&try_get), g_error);
  EXPECT_EQ(g_code, PJRT_Error_Code_NOT_FOUND);
}

TEST(KeyValueStore, NoStoreLeavesTheCallbacksUnset) {
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  pjrt::connect_key_value_store(create, nullptr);
  EXPECT_EQ(create.kv_get_callback, nullptr);
  EXPECT_EQ(create.kv_put_callback, nullptr);
}

}  // namespace
}  // namespace tpu
