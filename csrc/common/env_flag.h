// A boolean environment switch: set to anything but "" or "0" means on; unset (or "") means
// `unset`.
#pragma once

namespace tpu {

bool env_flag(const char* name, bool unset = false);

}  // namespace tpu
