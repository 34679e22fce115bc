// The names of the public enums (dtype, op, mode, late), written once: the C API's
// pcoll_*_name / pcoll_*_from_name, error messages, traces, and through the C API the tools
// and the Python package all read them from here.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <pcoll/pcoll.h>

namespace pcoll {

struct EnumName {
  int value;
  const char* name;
};

std::span<const EnumName> dtype_names();
std::span<const EnumName> op_names();
std::span<const EnumName> mode_names();  // mode_table.cpp
std::span<const EnumName> late_names();

// The name of `value`, or nullptr when the table has none.
const char* name_of(std::span<const EnumName> table, int value);
// The value named `name`, or nullopt.
std::optional<int> value_of(std::span<const EnumName> table, std::string_view name);
// "float32, float64, ...": every name of the table, for messages.
std::string name_list(std::span<const EnumName> table);

}  // namespace pcoll
