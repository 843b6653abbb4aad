// Result of a public API call: a code and, when not ok, a message that names the culprit.
//
// The library throws magnetar::Error on cold paths internally; the public boundary (engine,
// session) converts those into a status, so front ends never see exceptions. The type is
// [[nodiscard]]: a call whose status is dropped does not compile (with -Werror).
#pragma once

#include <string>
#include <utility>

namespace magnetar {

enum class status_code {
    ok,
    invalid_argument,  // bad option or input (token id out of range, empty batch, ...)
    model_error,       // the model file could not be loaded or validated
    context_full,      // the batch does not fit into the session's context
    unsupported,       // a feature the loaded model does not have (e.g. MTP)
    cancelled,         // the caller's cancel callback stopped the evaluation
    bad_payload,       // a session payload that does not belong to this model / session
    internal,
};

class [[nodiscard]] status {
  public:
    status() = default;
    status(status_code code, std::string message) : code_(code), message_(std::move(message)) {}
    static status ok_status() { return {}; }

    bool ok() const { return code_ == status_code::ok; }
    explicit operator bool() const { return ok(); }
    status_code code() const { return code_; }
    const std::string& message() const { return message_; }

  private:
    status_code code_ = status_code::ok;
    std::string message_;
};

}  // namespace magnetar
