// Elementwise reduction kernels of the allreduce engine, on the accumulation type
// (see dtype.hpp: float16/bfloat16 accumulate in float32, the others in themselves).
//
// Every op is bitwise commutative, op(a, b) == op(b, a) bit for bit, because ranks combine
// the same pair of partial results in opposite orders and must still end bitwise identical:
//   sum, avg  IEEE addition; a NaN result is replaced by the canonical quiet NaN (+qNaN),
//             because hardware returns the *first* operand's payload when both are NaN.
//             Integers wrap (two's complement), computed in unsigned arithmetic.
//   min, max  total order on numbers with -0.0 < +0.0; any NaN operand gives +qNaN.
//   avg       reduces exactly like sum; from_accumulator() divides by P once at the end
//             (IEEE division for floats; truncating division of the wrapped sum for ints).
// NaN results are therefore always 0x7fc00000 (float32 accumulators, incl. the 16-bit
// types, whose result becomes 0x7e00 / 0x7fc0) or 0x7ff8000000000000 (float64).
//
// Pointers must be aligned to their element type, and acc must not overlap the input.
// count is in elements. Unknown dtype / op values throw Error(invalid_argument).
#pragma once

#include <cstddef>

#include <pcoll/pcoll.h>

namespace pcoll {

// acc[i] = widen(user[i]); acc holds count accumulation elements.
void to_accumulator(pcoll_dtype_t dtype, const void* user, std::byte* acc, std::size_t count);

// user[i] = narrow(acc[i]) (round to nearest even for 16-bit types), after dividing by
// ranks for PCOLL_OP_AVG. ranks must be >= 1; it is ignored for the other ops.
void from_accumulator(pcoll_dtype_t dtype, pcoll_op_t op, int ranks, const std::byte* acc,
                      void* user, std::size_t count);

// acc[i] = op(acc[i], in[i]), both on the accumulation type (landing slot -> work buffer).
void reduce_into(pcoll_dtype_t dtype, pcoll_op_t op, std::byte* acc, const std::byte* in,
                 std::size_t count);

// acc[i] = op(acc[i], widen(user[i])): folds application data (user dtype) into an
// accumulation buffer without a temporary, e.g. a late sendbuf into the carry.
void reduce_user_into(pcoll_dtype_t dtype, pcoll_op_t op, std::byte* acc, const void* user,
                      std::size_t count);

// carry += sendbuf: reduce_user_into with PCOLL_OP_SUM (the op for sum and avg carries).
void add_into(pcoll_dtype_t dtype, std::byte* acc, const void* user, std::size_t count);

// acc[i] = the identity of op, so that an empty contribution changes nothing:
// sum/avg -0.0 for floats (-0.0 + x == x for every x, +0.0 + -0.0 would not be) and 0 for
// integers; min +inf / the largest integer; max -inf / the smallest integer.
void fill_identity(pcoll_dtype_t dtype, pcoll_op_t op, std::byte* acc, std::size_t count);

}  // namespace pcoll
