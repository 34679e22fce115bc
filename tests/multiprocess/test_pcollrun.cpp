// Rules of the pcollrun launcher (tools/pcollrun.cpp), checked by running it on
// tests/bootstrap_rank and /bin/sh. Every run has a deadline; a run that misses it fails.
#include <doctest/doctest.h>

#include <regex>

#include "subprocess.hpp"

namespace {

using test::Process;
using std::chrono::milliseconds;

std::string rank_program() { return test::program_path("PCOLL_TEST_RANK_PROGRAM"); }
std::string pcollrun() { return test::program_path("PCOLL_TEST_PCOLLRUN"); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("pcollrun returns 0 when every rank succeeds") {
  Process p({pcollrun(), "-n", "4", rank_program(), "gather", "2"}, {});
  CHECK(p.finish() == 0);
  CHECK(test::count_of(p.out(), "ok (pcollrun)") == 4);
}

TEST_CASE("pcollrun returns the exit code of the failing rank") {
  Process p({pcollrun(), "-n", "3", rank_program(), "exit-if-rank", "1", "7"}, {});
  CHECK(p.finish() == 7);
  CHECK(p.err().find("rank 1 exited with code 7") != std::string::npos);
}

TEST_CASE("pcollrun terminates the other ranks when one fails") {
  // The other ranks sleep 20 s; pcollrun must stop them long before that.
  const auto started = std::chrono::steady_clock::now();
  Process p({pcollrun(), "-n", "4", rank_program(), "exit-if-rank", "2", "3"}, {});
  CHECK(p.finish() == 3);
  CHECK(std::chrono::steady_clock::now() - started < milliseconds(8000));
}

TEST_CASE("a rank killed by a signal makes pcollrun return 128 + signal") {
  const auto started = std::chrono::steady_clock::now();
  Process p({pcollrun(), "-n", "3", rank_program(), "signal-if-rank", "0", std::to_string(SIGKILL)}, {});
  CHECK(p.finish() == 128 + SIGKILL);
  CHECK(p.err().find("rank 0 was killed by SIGKILL") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - started < milliseconds(8000));
}

TEST_CASE("nonsense arguments get a usage message and exit 2") {
  const std::vector<std::vector<std::string>> cases = {
      {"-n", "0", "/bin/true"},
      {"-n", "abc", "/bin/true"},
      {"-n", "100000", "/bin/true"},
      {"-n", "2"},
      {"/bin/true"},
      {"-n", "2", "--frobnicate", "/bin/true"},
      {"-n", "2", "--timeout-ms", "soon", "/bin/true"},
      {"-n"},
      {},
  };
  for (const auto& args : cases) {
    std::vector<std::string> argv = {pcollrun()};
    argv.insert(argv.end(), args.begin(), args.end());
    CAPTURE(argv.size());
    Process p(argv, {});
    CHECK(p.finish(milliseconds(10000)) == 2);
    CHECK(p.err().find("usage: pcollrun") != std::string::npos);
  }
}

TEST_CASE("a program that does not exist is a clear error with a non-zero exit") {
  Process p({pcollrun(), "-n", "2", "no-such-program-pcoll"}, {});
  CHECK(p.finish(milliseconds(10000)) == 127);
  CHECK(p.err().find("cannot run 'no-such-program-pcoll'") != std::string::npos);
}

TEST_CASE("output is forwarded from every rank's stdout and stderr") {
  Process p({pcollrun(), "-n", "3", rank_program(), "echo"}, {});
  CHECK(p.finish() == 0);
  for (int r = 0; r < 3; ++r) {
    CHECK(test::count_of(p.out(), "hello from rank " + std::to_string(r) + "\n") == 1);
    CHECK(test::count_of(p.err(), "warning from rank " + std::to_string(r) + "\n") == 1);
  }
}

TEST_CASE("--tag-output prefixes every line with [rank] and never splits a line") {
  // Each rank writes every line in three pieces with pauses in between.
  Process p({pcollrun(), "-n", "3", "--tag-output", rank_program(), "partial-lines", "20"}, {});
  CHECK(p.finish() == 0);
  const std::regex line(R"(\[(\d)\] rank(\d)-line(\d+)-end)");
  const auto lines = lines_of(p.out());
  CHECK(lines.size() == 60);
  for (const auto& l : lines) {
    CAPTURE(l);
    std::smatch m;
    REQUIRE(std::regex_match(l, m, line));
    CHECK(m[1] == m[2]);
  }
  Process e({pcollrun(), "-n", "2", "--tag-output", rank_program(), "echo"}, {});
  CHECK(e.finish() == 0);
  CHECK(test::count_of(e.err(), "[1] warning from rank 1\n") == 1);
}

TEST_CASE("SIGTERM to pcollrun is forwarded to the ranks") {
  Process p({pcollrun(), "-n", "2", rank_program(), "wait-term"}, {});
  REQUIRE(p.wait_for_output("ready", 2, milliseconds(10000)));
  p.signal(SIGTERM);
  CHECK(p.finish(milliseconds(10000)) == 128 + SIGTERM);
  CHECK(test::count_of(p.out(), "got SIGTERM") == 2);
}

TEST_CASE("SIGINT (Ctrl-C) to pcollrun is forwarded to the ranks") {
  // The ranks do not handle SIGINT, so they die of it.
  Process p({pcollrun(), "-n", "2", rank_program(), "wait-term"}, {});
  REQUIRE(p.wait_for_output("ready", 2, milliseconds(10000)));
  const auto started = std::chrono::steady_clock::now();
  p.signal(SIGINT);
  CHECK(p.finish(milliseconds(10000)) == 128 + SIGINT);
  CHECK(std::chrono::steady_clock::now() - started < milliseconds(2000));  // not the SIGKILL grace
}

TEST_CASE("pcollrun gives the ranks their rank, size, store and the options it was given") {
  Process p({pcollrun(), "-n", "2", "--provider", "ofi:tcp", "--timeout-ms", "1234", "/bin/sh", "-c",
             "echo \"$PCOLL_RANK/$PCOLL_SIZE $PCOLL_PROVIDER $PCOLL_TIMEOUT_MS $PCOLL_LAUNCHER "
             "${#PCOLL_JOB_KEY} $PCOLL_ROOT\""},
            {});
  CHECK(p.finish() == 0);
  const std::regex line(R"([01]/2 ofi:tcp 1234 pcollrun 64 127\.0\.0\.1:\d+)");
  const auto lines = lines_of(p.out());
  REQUIRE(lines.size() == 2);
  for (const auto& l : lines) {
    CAPTURE(l);
    CHECK(std::regex_match(l, line));
  }
}

TEST_CASE("pcollrun refuses a bad setting it would hand to its ranks, naming it, before starting them") {
  // PCOLL_LOG=verbose used to stop pcollrun's store and leave the ranks waiting 30 s.
  struct Case {
    std::string variable;
    std::string value;
  };
  const std::vector<Case> cases = {{"PCOLL_LOG", "verbose"},        {"PCOLL_SPIN_US", "long"},
                                   {"PCOLL_YIELD", "sometimes"},    {"PCOLL_NOTIFY_BITS", "16"},
                                   {"PCOLL_TIMEOUT_MS", "0"},       {"PCOLL_BOOTSTRAP", "magic"},
                                   {"PCOLL_TEST_ATOMICS", "many"}};
  for (const auto& c : cases) {
    CAPTURE(c.variable);
    const auto started = std::chrono::steady_clock::now();
    Process p({pcollrun(), "-n", "2", "/bin/sh", "-c", "echo started"}, {{c.variable, c.value}});
    CHECK(p.finish(milliseconds(10000)) == 2);
    CHECK(p.err().find(c.variable) != std::string::npos);
    CHECK(p.err().find("pcollrun: ") == 0);
    CHECK(p.out().find("started") == std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < milliseconds(5000));
  }
}

TEST_CASE("pcollrun refuses a PCOLL_BOOTSTRAP other than its own store, and accepts store and auto") {
  for (const std::string other : {"pmix", "pmi2", "single"}) {
    CAPTURE(other);
    Process p({pcollrun(), "-n", "2", "/bin/sh", "-c", "echo started"}, {{"PCOLL_BOOTSTRAP", other}});
    CHECK(p.finish(milliseconds(10000)) == 2);
    CHECK(p.err().find("PCOLL_BOOTSTRAP=" + other + " is set") != std::string::npos);
    CHECK(p.out().find("started") == std::string::npos);
  }
  for (const std::string ours : {"store", "auto"}) {
    CAPTURE(ours);
    Process p({pcollrun(), "-n", "2", rank_program(), "gather", "1"}, {{"PCOLL_BOOTSTRAP", ours}});
    CHECK(p.finish() == 0);
    CHECK(test::count_of(p.out(), "ok (pcollrun)") == 2);
  }
}
