// libFuzzer target: the TCP store's wire parsers (lib/bootstrap/include/bootstrap/store_wire.hpp) on arbitrary
// bytes. Every parser must either return something inside its input or throw
// Error(Errc::protocol); AddressSanitizer catches any read past the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include <bootstrap/store_wire.hpp>

namespace wire = pcoll::bootstrap::wire;

namespace {

bool inside(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void check(bool ok) {
  if (!ok) std::abort();
}

template <class Parse>
void payload(Parse parse) {
  try {
    parse();
  } catch (const pcoll::Error& e) {
    check(e.code() == pcoll::Errc::protocol);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span bytes(reinterpret_cast<const std::byte*>(data), size);

  // Framing, with a small and a large payload limit.
  for (const uint64_t limit : {uint64_t{wire::kMaxHelloBytes}, wire::max_result_payload(4)}) {
    const wire::FrameParse parsed = wire::parse_frame(bytes, limit);
    if (parsed.status == wire::FrameParse::Status::complete) {
      check(parsed.frame.bytes <= size && parsed.frame.payload.size() <= limit);
      check(inside(parsed.frame.payload, bytes));
    }
  }

  // Every payload parser on the whole input.
  payload([&] {
    const wire::Hello hello = wire::parse_hello(bytes);
    check(inside(hello.key, bytes));
  });
  payload([&] {
    const wire::Gather gather = wire::parse_gather(bytes);
    check(inside(gather.blob, bytes));
  });
  payload([&] {
    const wire::Result result = wire::parse_result(bytes);
    size_t total = 0;
    for (const auto& blob : result.blobs) total += blob.size();
    check(total <= size);
  });
  payload([&] { (void)wire::parse_error(bytes); });
  return 0;
}
