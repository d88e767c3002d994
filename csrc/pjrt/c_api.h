// The PJRT C API header. It is not part of this repository: CMake points the include path at
// the copy shipped inside the installed `xla-cpu-pjrt` package (see CMakeLists.txt).
#pragma once

#include <pjrt_c_api.h>
