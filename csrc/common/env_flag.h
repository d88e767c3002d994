// A boolean environment switch: set to anything but "" or "0" means on.
#pragma once

namespace tpu {

bool env_flag(const char* name);

}  // namespace tpu
