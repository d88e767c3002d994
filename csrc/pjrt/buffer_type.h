// Mapping between the core's ElementType and PJRT_Buffer_Type.
#pragma once

#include "common/element_type.h"
#include "pjrt/c_api.h"

namespace tpu::pjrt {

PJRT_Buffer_Type to_pjrt(ElementType t);
// Throws std::invalid_argument for PJRT types the core does not handle.
ElementType from_pjrt(PJRT_Buffer_Type t);

}  // namespace tpu::pjrt
