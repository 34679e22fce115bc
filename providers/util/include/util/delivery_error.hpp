// A provider's first delivery error, kept by its progress for the next poll() to throw,
// once (transport.hpp, poll()). Guarded by the provider's own lock.
#pragma once

#include <optional>
#include <utility>

#include <support/error.hpp>

namespace pcoll::transport {

class DeliveryError {
 public:
  // Keeps `error` unless an earlier one is kept: the first one is the cause.
  void keep(Error error) {
    if (!error_) error_.emplace(std::move(error));
  }
  bool kept() const { return error_.has_value(); }
  // Throws the kept error the first time it is called after keep(); returns otherwise.
  void throw_once() {
    if (!error_ || thrown_) return;
    thrown_ = true;
    throw *error_;
  }

 private:
  std::optional<Error> error_;
  bool thrown_ = false;
};

}  // namespace pcoll::transport
