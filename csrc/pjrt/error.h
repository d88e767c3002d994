// PJRT errors as C++ exceptions. Every PJRT_Error* returned by the plugin goes through
// check(), which copies the plugin's message and code and destroys the error object.
#pragma once

#include <stdexcept>
#include <string>

#include "pjrt/c_api.h"

namespace tpu::pjrt {

class PjrtError : public std::runtime_error {
 public:
  PjrtError(std::string message, PJRT_Error_Code code)
      : std::runtime_error(std::move(message)), code_(code) {}
  PJRT_Error_Code code() const { return code_; }

 private:
  PJRT_Error_Code code_;
};

// Name of a PJRT error code ("INVALID_ARGUMENT", ...).
const char* error_code_name(PJRT_Error_Code code);

// Takes ownership of `error`: returns its message and code, then destroys it.
struct ErrorInfo {
  std::string message;
  PJRT_Error_Code code;
};
ErrorInfo consume_error(const PJRT_Api* api, PJRT_Error* error);

// Throws PjrtError("<what>: <plugin message>") when `error` is non-null; destroys it either way.
void check(const PJRT_Api* api, PJRT_Error* error, const char* what);

}  // namespace tpu::pjrt
