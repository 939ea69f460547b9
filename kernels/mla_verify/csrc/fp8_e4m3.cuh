// fp8 e4m3fn -> f16 conversion shared by the dense (mla_verify) and sparse (dsa_verify) kernels: one owner.
#pragma once
#include <stdint.h>

namespace fp8e4m3 {

// Two e4m3 bytes (low byte first) -> f16x2, exactly (every finite e4m3 value, subnormals included, is an f16
// normal): the low (HI = false) or high half of `four`, one cvt.rn.f16x2.e4m3x2 (sm_89 and later). The high half
// is named as the b16 half of the register (mov.b32 {lo, hi}), which ptxas folds into the conversion's operand;
// `four >> 16` would cost a shift per conversion.
template <bool HI = false>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t four) {
  uint32_t d;
  if constexpr (HI)
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(d) : "r"(four));
  else
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(d) : "r"(four));
  return d;
}

}  // namespace fp8e4m3
