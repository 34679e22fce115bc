// The names of the public enums, one table each, in the enums' order (the modes' is the
// mode table's, mode_table.cpp).
#include <collectives/enum_names.hpp>

namespace pcoll {
namespace {

constexpr EnumName kDtypes[] = {{PCOLL_FLOAT32, "float32"}, {PCOLL_FLOAT64, "float64"}, {PCOLL_INT32, "int32"},
                                {PCOLL_INT64, "int64"},     {PCOLL_BFLOAT16, "bfloat16"}, {PCOLL_FLOAT16, "float16"}};
constexpr EnumName kOps[] = {{PCOLL_OP_SUM, "sum"}, {PCOLL_OP_AVG, "avg"}, {PCOLL_OP_MIN, "min"}, {PCOLL_OP_MAX, "max"}};
constexpr EnumName kLate[] = {{PCOLL_LATE_CARRY, "carry"}, {PCOLL_LATE_DROP, "drop"}};

}  // namespace

std::span<const EnumName> dtype_names() { return kDtypes; }
std::span<const EnumName> op_names() { return kOps; }
std::span<const EnumName> late_names() { return kLate; }

const char* name_of(std::span<const EnumName> table, int value) {
  for (const EnumName& entry : table)
    if (entry.value == value) return entry.name;
  return nullptr;
}

std::optional<int> value_of(std::span<const EnumName> table, std::string_view name) {
  for (const EnumName& entry : table)
    if (name == entry.name) return entry.value;
  return std::nullopt;
}

std::string name_list(std::span<const EnumName> table) {
  std::string list;
  for (const EnumName& entry : table) list += (list.empty() ? "" : ", ") + std::string(entry.name);
  return list;
}

}  // namespace pcoll
