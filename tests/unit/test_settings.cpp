// The settings table's readers (lib/support/include/support/settings.hpp): defaults from the table, values
// checked against their declared type with errors naming the variable, and the names the
// table does not know. One process; each case sets and clears its own variables.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <support/env.hpp>
#include <support/error.hpp>
#include <support/settings.hpp>

extern char** environ;

namespace settings = pcoll::settings;

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
  CHECK(settings::get_unsigned("PCOLL_TIMEOUT_MS") == 30000);
  CHECK(settings::get_choice("PCOLL_YIELD") == "auto");
  CHECK(settings::get_text("PCOLL_PROVIDER") == std::string(settings::kDefaultProvider));
  ScopedEnv empty("PCOLL_SPIN_US", "");
  CHECK(settings::get_unsigned("PCOLL_SPIN_US") == 50);
  CHECK_FALSE(settings::raw("PCOLL_SPIN_US"));
}

TEST_CASE("a set variable is read and checked against its type") {
  ScopedEnv timeout("PCOLL_TIMEOUT_MS", "5000");
  ScopedEnv log("PCOLL_LOG", "debug");
  ScopedEnv cpu("PCOLL_PROGRESS_CPU", "3");
  CHECK(settings::get_unsigned("PCOLL_TIMEOUT_MS") == 5000);
  CHECK(settings::get_choice("PCOLL_LOG") == "debug");
  CHECK(settings::get_choice("PCOLL_PROGRESS_CPU") == "3");
  const auto in_effect = settings::effective(*settings::find("PCOLL_TIMEOUT_MS"));
  CHECK(in_effect.value == "5000");
  CHECK(in_effect.from_environment);
  CHECK(in_effect.error.empty());
}

TEST_CASE("a malformed value is an error naming the variable and what it accepts") {
  {
    ScopedEnv bad("PCOLL_CHUNK_BYTES", "1024");
    CHECK(error_of([] { settings::get_unsigned("PCOLL_CHUNK_BYTES"); }) ==
          "PCOLL_CHUNK_BYTES=1024 is out of range (expected an integer from 4096 to 1073741824)");
  }
  {
    ScopedEnv bad("PCOLL_YIELD", "sometimes");
    CHECK(error_of([] { settings::get_choice("PCOLL_YIELD"); }) ==
          "PCOLL_YIELD='sometimes' is not one of: auto, always, never");
  }
  {
    ScopedEnv bad("PCOLL_PROGRESS_CPU", "fast");
    CHECK(error_of([] { settings::get_choice("PCOLL_PROGRESS_CPU"); }) ==
          "PCOLL_PROGRESS_CPU='fast' is not auto, none or an integer from 0 to 65535");
    const auto in_effect = settings::effective(*settings::find("PCOLL_PROGRESS_CPU"));
    CHECK(in_effect.value == "fast");
    CHECK(contains(in_effect.error, "PCOLL_PROGRESS_CPU"));
  }
}

TEST_CASE("a setting without default is absent until set") {
  CHECK_FALSE(settings::get_text("PCOLL_NIC"));
  CHECK(contains(error_of([] { settings::get_unsigned("PCOLL_SIZE"); }), "PCOLL_SIZE is not set"));
  CHECK(settings::parse_unsigned("PCOLL_SIZE", "4") == 4);
  CHECK(contains(error_of([] { settings::parse_unsigned("PCOLL_SIZE", "0"); }), "PCOLL_SIZE=0 is out of range"));
}

TEST_CASE("a PCOLL_ name the table lacks is reported with the closest known name") {
  ScopedEnv typo("PCOLL_TIMEOUT", "5000");
  ScopedEnv launcher("PCOLL_LOCAL_RANK", "0");
  ScopedEnv test("PCOLL_TEST_INFO", "unused");
  const auto unknown = settings::unknown_variables();
  REQUIRE(unknown.size() == 1);
  CHECK(unknown[0].name == "PCOLL_TIMEOUT");
  CHECK(unknown[0].closest == "PCOLL_TIMEOUT_MS");
  CHECK(unknown[0].distance == 3);
}

TEST_CASE("every kind of variable is in the table") {
  CHECK(settings::find("PCOLL_TIMEOUT_MS")->kind == settings::Kind::user);
  CHECK(settings::find("PCOLL_JOB_KEY")->kind == settings::Kind::launcher);
  CHECK(settings::find("PCOLL_TEST_ATOMICS")->kind == settings::Kind::test);
  CHECK(settings::find("PCOLL_TIMEOUT") == nullptr);
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
  static_assert(settings::unsigned_default("PCOLL_RD_MAX_BYTES") == 32768);
  CHECK(settings::unsigned_default("PCOLL_CHUNK_BYTES") == 262144);
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
