// Element type properties: sizes, accumulation types, names and argument checks.
#include <collectives/dtype.hpp>
#include <collectives/enum_names.hpp>

#include <string>

#include <support/error.hpp>

namespace pcoll {

namespace {

bool valid_dtype(pcoll_dtype_t dtype) {
  const int value = static_cast<int>(dtype);
  return value >= PCOLL_FLOAT32 && value <= PCOLL_FLOAT16;
}

bool valid_op(pcoll_op_t op) {
  const int value = static_cast<int>(op);
  return value >= PCOLL_OP_SUM && value <= PCOLL_OP_MAX;
}

}  // namespace

void check_dtype(pcoll_dtype_t dtype) {
  if (!valid_dtype(dtype)) {
    invalid_argument("unknown dtype " + std::to_string(static_cast<int>(dtype)) +
                     "; use one of PCOLL_FLOAT32, PCOLL_FLOAT64, PCOLL_INT32, PCOLL_INT64, "
                     "PCOLL_BFLOAT16, PCOLL_FLOAT16");
  }
}

void check_op(pcoll_op_t op) {
  if (!valid_op(op)) {
    invalid_argument("unknown reduction op " + std::to_string(static_cast<int>(op)) +
                     "; use one of PCOLL_OP_SUM, PCOLL_OP_AVG, PCOLL_OP_MIN, PCOLL_OP_MAX");
  }
}

std::size_t element_bytes(pcoll_dtype_t dtype) {
  switch (dtype) {
    case PCOLL_FLOAT32: return 4;
    case PCOLL_FLOAT64: return 8;
    case PCOLL_INT32: return 4;
    case PCOLL_INT64: return 8;
    case PCOLL_BFLOAT16: return 2;
    case PCOLL_FLOAT16: return 2;
  }
  check_dtype(dtype);
  return 0;  // not reached: check_dtype throws
}

pcoll_dtype_t accumulation_dtype(pcoll_dtype_t dtype) {
  check_dtype(dtype);
  return (dtype == PCOLL_BFLOAT16 || dtype == PCOLL_FLOAT16) ? PCOLL_FLOAT32 : dtype;
}

std::size_t wire_element_bytes(pcoll_dtype_t dtype) {
  return element_bytes(accumulation_dtype(dtype));
}

const char* dtype_name(pcoll_dtype_t dtype) {
  const char* name = name_of(dtype_names(), static_cast<int>(dtype));
  return name != nullptr ? name : "invalid";
}

const char* op_name(pcoll_op_t op) {
  const char* name = name_of(op_names(), static_cast<int>(op));
  return name != nullptr ? name : "invalid";
}

}  // namespace pcoll
