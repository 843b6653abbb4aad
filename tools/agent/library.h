// Saved agent sessions: each is a JSON record (the messages, the prompt text and its tokens,
// the settings) beside a disk KV file of its evaluated state in the KV store, plus one KV file
// of the system prompt and tool contract alone, which every new session starts from.
//
// The KV store (src/kvstore) checks each file's integrity and model fingerprint before it is
// loaded, and a state is only taken when its tokens are exactly a prefix of the transcript's
// (a byte match is not enough: a control token and its plain spelling decode alike). A record
// whose KV file is gone (evicted under the disk budget, another model's) still restores: the
// transcript is then evaluated again.
//
// Layout of the directory: kv/ (the KV store's files) and sessions/<id>.json, both mode 0700.
//
// Owns: the records, their ids, finding one by prefix, the base checkpoint. Does not own: the
// KV file format or the budget (src/kvstore), the conversation (transcript.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/transcript.h"
#include "magnetar/engine.h"
#include "magnetar/session.h"

namespace magnetar::kvstore {
class store;
}

namespace magnetar::agent {

struct saved_info {
    std::string id;  // 16 lowercase hex digits
    std::string title;
    uint64_t created = 0;  // unix seconds
    uint64_t updated = 0;
    int64_t tokens = 0;
    int64_t messages = 0;
    bool has_state = false;  // its KV file is stored
};

struct saved_session {
    saved_info info;
    std::vector<chat::message> messages;
    chat::think_mode mode = chat::think_mode::think;
    std::string text;
    std::vector<int32_t> tokens;
    std::string kv_path;
};

class library {
  public:
    // Creates dir (and its two folders) when needed. Throws magnetar::Error when it cannot, or
    // when the KV store refuses the folder (not the user's own, world-writable).
    library(std::string dir, const Engine& engine, uint64_t budget_bytes,
            std::function<void(const std::string&)> log = {});
    ~library();

    const std::string& dir() const { return dir_; }

    // Loads the longest stored state whose tokens are a prefix of t's into `s` (the base
    // checkpoint, a saved session); returns its token count, 0 when none fits (`s` may then
    // have been emptied).
    int64_t load_state(const transcript& t, Session& s);
    // Stores the session's timeline (which must be t's tokens) as the base checkpoint when
    // the store has no state for exactly that text yet.
    void save_base(const transcript& t, const Session& s);

    // Saves the conversation under `id` (empty: a new id) with the session's state (the
    // session must hold t's tokens); returns the id. The record is written through a temp
    // file and a rename; a failed KV write leaves the record without state.
    std::string save(const std::string& id, const std::string& title, const transcript& t,
                     const Session& s);
    // Saved sessions, the latest first. Records that do not parse are skipped.
    std::vector<saved_info> list() const;
    // The one record whose id starts with `prefix`; throws magnetar::Error when none or
    // several do, or the record is damaged.
    saved_session find(const std::string& prefix) const;

  private:
    saved_session read_record(const std::string& path) const;

    std::string dir_;
    const Engine& engine_;
    std::unique_ptr<kvstore::store> store_;
    std::function<void(const std::string&)> log_;
};

}  // namespace magnetar::agent
