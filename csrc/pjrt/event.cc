#include "pjrt/event.h"

namespace tpu::pjrt {

Event::~Event() {
  if (event_ == nullptr) return;
  PJRT_Event_Destroy_Args args{};
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event_;
  if (PJRT_Error* err = api_->PJRT_Event_Destroy(&args)) consume_error(api_, err);
}

void Event::await(const char* what) {
  PJRT_Event_Await_Args args{};
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = event_;
  check(api_, api_->PJRT_Event_Await(&args), what);
}

bool Event::is_ready() const {
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = event_;
  check(api_, api_->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady");
  return args.is_ready;
}

std::optional<ErrorInfo> Event::error() const {
  PJRT_Event_Error_Args args{};
  args.struct_size = PJRT_Event_Error_Args_STRUCT_SIZE;
  args.event = event_;
  PJRT_Error* err = api_->PJRT_Event_Error(&args);
  if (err == nullptr) return std::nullopt;
  return consume_error(api_, err);
}

namespace {
struct CallbackBox {
  const PJRT_Api* api;
  std::function<void(const ErrorInfo*)> fn;
};

void trampoline(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<CallbackBox> box(static_cast<CallbackBox*>(user_arg));
  if (error == nullptr) {
    box->fn(nullptr);
  } else {
    ErrorInfo info = consume_error(box->api, error);
    box->fn(&info);
  }
}
}  // namespace

void Event::on_ready(std::function<void(const ErrorInfo*)> callback) {
  auto* box = new CallbackBox{api_, std::move(callback)};
  PJRT_Event_OnReady_Args args{};
  args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  args.event = event_;
  args.callback = &trampoline;
  args.user_arg = box;
  if (PJRT_Error* err = api_->PJRT_Event_OnReady(&args)) {
    delete box;
    check(api_, err, "PJRT_Event_OnReady");
  }
}

}  // namespace tpu::pjrt
