// The PCOLL_NIC check every provider gets at creation (providers/util/include/util/host_nics.hpp):
// a name of this host passes in any provider's form of it, anything else is refused naming
// the setting, the value and the NICs there are.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <support/error.hpp>
#include <util/host_nics.hpp>

using pcoll::transport::check_nic_setting;
using pcoll::transport::host_nics;

namespace {

struct ScopedNic {
  explicit ScopedNic(const std::string& value) { ::setenv("PCOLL_NIC", value.c_str(), 1); }
  ~ScopedNic() { ::unsetenv("PCOLL_NIC"); }
};

std::string refusal() {
  try {
    check_nic_setting();
  } catch (const pcoll::Error& e) {
    CHECK(e.code() == pcoll::Errc::invalid_argument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every host has lo among its NICs") {
  const auto names = host_nics();
  CHECK(std::find(names.begin(), names.end(), "lo") != names.end());
}

TEST_CASE("unset PCOLL_NIC and names of this host pass, in a provider's form too") {
  ::unsetenv("PCOLL_NIC");
  CHECK(refusal().empty());
  for (const char* value : {"lo", "lo:1", "lo-rdm"}) {
    ScopedNic nic(value);
    CHECK_MESSAGE(refusal().empty(), value);
  }
}

TEST_CASE("a PCOLL_NIC naming no NIC of this host is refused with the NICs there are") {
  ScopedNic nic("bogus0");
  const std::string message = refusal();
  CHECK(message.find("PCOLL_NIC=bogus0") != std::string::npos);
  CHECK(message.find("lo") != std::string::npos);
  ScopedNic prefix("l");  // a prefix of a name is not that name
  CHECK_FALSE(refusal().empty());
}
