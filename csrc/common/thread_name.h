// Names the calling thread for tools that list a process's threads (`top -H`, perf, /proc, and
// `python -m torch_tpu.bench host`, which groups a step's CPU time by thread name).
#pragma once

namespace tpu {

// `name` is cut to the 15 characters Linux keeps; a no-op where threads have no names.
void name_this_thread(const char* name);

}  // namespace tpu
