//===- float_convert.h - bf16 / f16 <-> f32 ---------------------*- C++ -*-===//
//
// Bit-exact conversions between the storage formats of checkpoints and the
// compute dtypes: widening is exact; narrowing rounds to nearest even and
// keeps NaN a NaN.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_FLOAT_CONVERT_H
#define KIMI_RUNTIME_WEIGHTS_FLOAT_CONVERT_H

#include <cstdint>

namespace kimi::rt {

float bf16ToF32(uint16_t bits);
float f16ToF32(uint16_t bits);
uint16_t f32ToBf16(float value);
uint16_t f32ToF16(float value);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_FLOAT_CONVERT_H
