#include "device/storage_resize.h"

#include <c10/util/Exception.h>

#include "device/allocator.h"
#include "exec/executor.h"

namespace tpu::device {

void resize_storage_bytes(const c10::Storage& storage, size_t new_nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  runtime::DeviceStorage& s = storage_of(storage);
  const size_t old_nbytes = s.nbytes();
  if (new_nbytes == old_nbytes) return;
  allocator().check_growth(s.device(), old_nbytes, new_nbytes);
  // Freed (FSDP2 frees its unsharded parameters this way after each use): the old contents are
  // not needed, so a pending Fused graph that writes them is not run for it - it forgets the
  // storage (ops it recorded read their values inside the graph; it keeps the buffers it binds).
  auto contents = new_nbytes == 0 ? runtime::DeviceStorage::Contents{} : s.contents();
  if (contents.buffer == nullptr) {
    s.clear();
  } else {
    // Keep the common prefix of the bytes: read the old buffer as bytes, pad or cut.
    const int64_t keep = static_cast<int64_t>(std::min(old_nbytes, new_nbytes));
    exec::OpCall call;
    call.op = "resize_bytes";
    call.label = "aten::resize_";
    call.attrs.set_int("keep", keep).set_int("new_nbytes", static_cast<int64_t>(new_nbytes));
    exec::View whole{ElementType::kU8, {static_cast<int64_t>(old_nbytes)}, {1}, 0};
    call.inputs.push_back(exec::Input::tensor(&s, whole, ElementType::kU8));
    call.outputs.push_back(std::nullopt);
    call.device = s.device();
    auto out = exec::Executor::get().run(call);
    exec::Executor::get().assign(s, std::move(out[0]), call.label);
  }
  s.set_nbytes(new_nbytes);
  allocator().account_resize(s.device(), old_nbytes, new_nbytes);
  const_cast<c10::Storage&>(storage).unsafeGetStorageImpl()->set_nbytes(new_nbytes);
}

}  // namespace tpu::device
