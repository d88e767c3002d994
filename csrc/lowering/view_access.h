// Reading and writing strided views of a storage buffer in StableHLO: the one place where
// PyTorch's (sizes, strides, storage_offset) view model becomes HLO.
//
// A storage is a rank-1 value `flat`. A view is (sizes, strides) in elements of flat's type
// plus an offset that is a runtime i64 scalar, so views that differ only in their offset share
// one executable. Views whose strides nest (transpose, permute, narrow, select, step slicing,
// diagonal, expand) become dynamic_slice + reshape + slice/transpose/broadcast; anything else
// (e.g. overlapping unfold windows) becomes a gather (read) or scatter (write).
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

// Reinterprets the bytes of rank-1 `flat` as element type `to` (little-endian memory order).
// When widening and the byte count is not a multiple of the new element size, the tail is
// zero-padded, so the result may cover a few bytes more than `flat`.
hlo::Value reinterpret_flat(hlo::Builder& b, hlo::Value flat, ElementType to);

// The elements of the view as a value of shape `sizes`.
hlo::Value read_strided(hlo::Builder& b, hlo::Value flat, hlo::Value offset, const hlo::Dims& sizes,
                        const hlo::Dims& strides);

// `flat` with the view's elements replaced by `value` (shape `sizes`, flat's element type).
// The view must not overlap itself (PyTorch refuses such writes before they get here).
hlo::Value write_strided(hlo::Builder& b, hlo::Value flat, hlo::Value offset, const hlo::Dims& sizes,
                         const hlo::Dims& strides, hlo::Value value);

// True when the view is the plain row-major layout of `sizes` (offset not considered).
bool is_contiguous(const hlo::Dims& sizes, const hlo::Dims& strides);

}  // namespace tpu::lowering
