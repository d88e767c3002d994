#include "pjrt/error.h"

namespace tpu::pjrt {

const char* error_code_name(PJRT_Error_Code code) {
  switch (code) {
    case PJRT_Error_Code_OK: return "OK";
    case PJRT_Error_Code_CANCELLED: return "CANCELLED";
    case PJRT_Error_Code_UNKNOWN: return "UNKNOWN";
    case PJRT_Error_Code_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case PJRT_Error_Code_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case PJRT_Error_Code_NOT_FOUND: return "NOT_FOUND";
    case PJRT_Error_Code_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case PJRT_Error_Code_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case PJRT_Error_Code_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case PJRT_Error_Code_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case PJRT_Error_Code_ABORTED: return "ABORTED";
    case PJRT_Error_Code_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case PJRT_Error_Code_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case PJRT_Error_Code_INTERNAL: return "INTERNAL";
    case PJRT_Error_Code_UNAVAILABLE: return "UNAVAILABLE";
    case PJRT_Error_Code_DATA_LOSS: return "DATA_LOSS";
    case PJRT_Error_Code_UNAUTHENTICATED: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

ErrorInfo consume_error(const PJRT_Api* api, PJRT_Error* error) {
  ErrorInfo info{"", PJRT_Error_Code_UNKNOWN};
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api->PJRT_Error_Message(&msg);
  info.message.assign(msg.message, msg.message_size);
  PJRT_Error_GetCode_Args code{};
  code.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  if (api->PJRT_Error_GetCode(&code) == nullptr) info.code = code.code;
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  return info;
}

void check(const PJRT_Api* api, PJRT_Error* error, const char* what) {
  if (error == nullptr) return;
  ErrorInfo info = consume_error(api, error);
  throw PjrtError(std::string(what) + " failed (" + error_code_name(info.code) +
                      "): " + info.message,
                  info.code);
}

}  // namespace tpu::pjrt
