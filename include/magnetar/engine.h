// The engine: an immutable loaded model (weights mapped from GGUF, validated once) plus its
// compute backend. Create sessions from it; each session is one token timeline.
//
// Sessions of one engine share its backend; their evaluations are serialized internally. A
// session must be destroyed before its engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "magnetar/session.h"
#include "magnetar/status.h"

namespace magnetar {

struct engine_options {
    std::string model_path;
    std::string
        mtp_path;  // separate MTP GGUF (as published); empty: MTP block of the main file, if any
    int n_threads = 0;  // 0: one per physical core
};

// What front ends need to know about the loaded model.
struct model_info {
    std::string name;
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    uint32_t n_vocab = 0;
    uint64_t n_ctx_train = 0;
    bool has_mtp = false;
    int n_threads = 0;
};

class Engine {
  public:
    static status load(const engine_options& opts, std::unique_ptr<Engine>* out);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const model_info& info() const;
    status create_session(const session_options& opts, std::unique_ptr<Session>* out) const;

    struct impl;

  private:
    explicit Engine(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace magnetar
