// The PyTorch headers most extension files include; precompiled once (CMake PCH).
#pragma once

#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>
