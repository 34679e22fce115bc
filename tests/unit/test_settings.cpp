// The settings readers (lib/support/include/support/settings.hpp) over the components' rows:
// defaults from the rows, values checked against their declared type with errors naming the
// variable, and the names the catalog (api/settings_catalog.hpp) does not know. One process;
// each case sets and clears its own variables.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <support/env.hpp>
#include <support/error.hpp>
#include <api/settings_catalog.hpp>
#include <collectives/collectives_settings.hpp>
#include <registry/registry_settings.hpp>
#include <support/settings.hpp>
#include <support/support_settings.hpp>

extern char** environ;

namespace settings = pcoll::settings;
using pcoll::CollectivesSettings;
using pcoll::RegistrySettings;
using pcoll::SupportSettings;

namespace {

// Sets a variable for one case and restores "unset" afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

std::string error_of(auto&& read) {
  try {
    read();
  } catch (const pcoll::Error& e) {
    CHECK(e.code() == pcoll::Errc::invalid_argument);
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an unset or empty variable takes the table's default") {
  CHECK(SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS") == 30000);
  CHECK(CollectivesSettings::get_choice("PCOLL_YIELD") == "auto");
  CHECK(RegistrySettings::get_text("PCOLL_PROVIDER") == std::string(settings::kDefaultProvider));
  ScopedEnv empty("PCOLL_SPIN_US", "");
  CHECK(CollectivesSettings::get_unsigned("PCOLL_SPIN_US") == 50);
  CHECK_FALSE(CollectivesSettings::raw("PCOLL_SPIN_US"));
}

TEST_CASE("a set variable is read and checked against its type") {
  ScopedEnv timeout("PCOLL_TIMEOUT_MS", "5000");
  ScopedEnv log("PCOLL_LOG", "debug");
  ScopedEnv cpu("PCOLL_PROGRESS_CPU", "3");
  CHECK(SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS") == 5000);
  CHECK(SupportSettings::get_choice("PCOLL_LOG") == "debug");
  CHECK(SupportSettings::get_choice("PCOLL_PROGRESS_CPU") == "3");
  const auto in_effect = settings::effective(*settings::find(settings::catalog(), "PCOLL_TIMEOUT_MS"));
  CHECK(in_effect.value == "5000");
  CHECK(in_effect.from_environment);
  CHECK(in_effect.error.empty());
}

TEST_CASE("a malformed value is an error naming the variable and what it accepts") {
  {
    ScopedEnv bad("PCOLL_CHUNK_BYTES", "1024");
    CHECK(error_of([] { CollectivesSettings::get_unsigned("PCOLL_CHUNK_BYTES"); }) ==
          "PCOLL_CHUNK_BYTES=1024 is out of range (expected an integer from 4096 to 1073741824)");
  }
  {
    ScopedEnv bad("PCOLL_YIELD", "sometimes");
    CHECK(error_of([] { CollectivesSettings::get_choice("PCOLL_YIELD"); }) ==
          "PCOLL_YIELD='sometimes' is not one of: auto, always, never");
  }
  {
    ScopedEnv bad("PCOLL_PROGRESS_CPU", "fast");
    CHECK(error_of([] { SupportSettings::get_choice("PCOLL_PROGRESS_CPU"); }) ==
          "PCOLL_PROGRESS_CPU='fast' is not auto, none or an integer from 0 to 65535");
    const auto in_effect = settings::effective(*settings::find(settings::catalog(), "PCOLL_PROGRESS_CPU"));
    CHECK(in_effect.value == "fast");
    CHECK(contains(in_effect.error, "PCOLL_PROGRESS_CPU"));
  }
}

TEST_CASE("a setting without default is absent until set") {
  CHECK_FALSE(SupportSettings::get_text("PCOLL_NIC"));
  CHECK(contains(error_of([] { SupportSettings::get_unsigned("PCOLL_SIZE"); }), "PCOLL_SIZE is not set"));
  CHECK(SupportSettings::parse_unsigned("PCOLL_SIZE", "4") == 4);
  CHECK(contains(error_of([] { SupportSettings::parse_unsigned("PCOLL_SIZE", "0"); }), "PCOLL_SIZE=0 is out of range"));
}

TEST_CASE("a PCOLL_ name the table lacks is reported with the closest known name") {
  ScopedEnv typo("PCOLL_TIMEOUT", "5000");
  ScopedEnv launcher("PCOLL_LOCAL_RANK", "0");
  ScopedEnv test("PCOLL_TEST_INFO", "unused");
  const auto unknown = settings::unknown_variables(settings::catalog());
  REQUIRE(unknown.size() == 1);
  CHECK(unknown[0].name == "PCOLL_TIMEOUT");
  CHECK(unknown[0].closest == "PCOLL_TIMEOUT_MS");
  CHECK(unknown[0].distance == 3);
}

TEST_CASE("every kind of variable is in the table") {
  CHECK(settings::find(settings::catalog(), "PCOLL_TIMEOUT_MS")->kind == settings::Kind::user);
  CHECK(settings::find(settings::catalog(), "PCOLL_JOB_KEY")->kind == settings::Kind::launcher);
  CHECK(settings::find(settings::catalog(), "PCOLL_TEST_ATOMICS")->kind == settings::Kind::test);
  CHECK(settings::find(settings::catalog(), "PCOLL_TIMEOUT") == nullptr);
}

TEST_CASE("each row belongs to one component, listed by kind") {
  const auto rows = settings::listed(settings::catalog());
  size_t total = 0;
  for (const auto& component : settings::catalog()) total += component.rows.size();
  CHECK(rows.size() == total);
  // user rows first, then the launcher's, then the tests'
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].setting->kind <= rows[i].setting->kind);
  const auto owner = [&](std::string_view name) {
    for (const auto& row : rows)
      if (row.setting->name == name) return row.component;
    return std::string_view();
  };
  CHECK(owner("PCOLL_CHUNK_BYTES") == "collectives");
  CHECK(owner("PCOLL_PROVIDER") == "registry");
  CHECK(owner("PCOLL_TEST_OFI_CQ_DATA_SIZE") == "ofi");
  CHECK(owner("PCOLL_TEST_ATOMICS") == "tests");
}

TEST_CASE("PCOLL_ variables cannot be read around the table") {
  ScopedEnv timeout("PCOLL_TIMEOUT_MS", "5000");
  try {
    pcoll::env::get("PCOLL_TIMEOUT_MS");
    FAIL("env::get read a PCOLL_ variable");
  } catch (const pcoll::Error& e) {
    CHECK(e.code() == pcoll::Errc::internal);
  }
}

TEST_CASE("an unsigned default is a compile-time constant") {
  static_assert(CollectivesSettings::unsigned_default("PCOLL_RD_MAX_BYTES") == 32768);
  CHECK(CollectivesSettings::unsigned_default("PCOLL_CHUNK_BYTES") == 262144);
}

// The cases assume a clean environment: drop whatever PCOLL_* the caller had set.
int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    if (text.starts_with("PCOLL_")) names.push_back(text.substr(0, text.find('=')));
  }
  for (const auto& name : names) ::unsetenv(name.c_str());
  return doctest::Context(argc, argv).run();
}
